"""Our side of the kubelet protocol: the device-plugin servers, registration, the pod resources client.

The kubelet stand-in that tests and the demo run against is :mod:`deviceplugin.standin`.
"""
