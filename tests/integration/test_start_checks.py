"""Services refuse to start on a namespace that was never migrated, saying what to run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import make_engine, require_schema
from common.errors import ConfigurationError

KAIROS = str(Path(sys.executable).parent / "kairos")


def test_migrated_namespace_passes(engine: Engine, namespace: StoreSettings) -> None:
    require_schema(engine, namespace.namespace)


def test_missing_database_names_the_fix() -> None:
    settings = StoreSettings(namespace="t_never_created_here")
    engine = make_engine(settings, pool_size=1)
    with pytest.raises(ConfigurationError, match="run `kairos migrate`"):
        require_schema(engine, settings.namespace)
    engine.dispose()


def test_worker_on_unmigrated_namespace_exits_with_the_message() -> None:
    done = subprocess.run(
        [KAIROS, "worker", "--id", "w1", "--handlers", "services.worker.demo"],
        env={"KAIROS_NAMESPACE": "t_never_created_here", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "kairos migrate" in done.stderr
