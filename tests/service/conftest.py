"""The embedded arithmetic model behind the service tests (its warm start is cached)."""

from __future__ import annotations

import pytest

from rlvr.service import ServiceClient


@pytest.fixture(scope="session")
def service(tmp_path_factory) -> ServiceClient:
    return ServiceClient(root=tmp_path_factory.mktemp("service"))
