"""A kubelet stand-in (device manager, registration, pod resources) for ``cmk demo`` and the protocol tests.

It behaves as ``docs/design/kubelet-contract.md`` says a real kubelet does, and is
never more lenient, so a plugin that passes against it passes against a
kubelet. Import the pieces from here.
"""

from deviceplugin.standin.lifecycle import ContainerStartError
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.options import KubeletOptions
from deviceplugin.standin.plugin_client import PluginOptions
from deviceplugin.standin.pods import (
    AdmissionError,
    AdmittedContainer,
    AdmittedPod,
    ContainerSpec,
    PodSpec,
)
from deviceplugin.standin.runoptions import Conflict, ContainerAnswer, DeviceNode, Mount
from deviceplugin.standin.standin import Kubelet, Registration

__all__ = [
    "AdmissionError",
    "AdmittedContainer",
    "AdmittedPod",
    "Conflict",
    "ContainerAnswer",
    "ContainerSpec",
    "ContainerStartError",
    "Device",
    "DeviceNode",
    "Kubelet",
    "KubeletOptions",
    "Mount",
    "PluginOptions",
    "PodSpec",
    "Registration",
]
