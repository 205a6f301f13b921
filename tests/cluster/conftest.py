"""The cluster tier's one node for the whole session, and the product deployed on it as a user does.

``node``: the real components from ``.ci/build-cluster`` (``CMK_CLUSTER_BIN``, or the script is run
to find or build them), the images imported. ``deployed``: README's deploy steps 4 and 5 (label, ``kubectl
apply -k`` of the test overlay and of ``deploy/admission``, wait for the rollout). Both are session
fixtures: a component that does not start raises once and pytest reports that error, log tail
included, for every test of the tier. Nothing here skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import images
from tests.cluster.deploy import Deployment, deploy_product
from tests.cluster.node import Node


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with images.node_with_images(tmp_path_factory.mktemp("cluster")) as up:
        yield up


@pytest.fixture(scope="session")
def deployed(node: Node) -> Deployment:
    return deploy_product(node)
