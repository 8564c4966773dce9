"""Handlers: the ``@handler`` mark and collecting marked functions from modules."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.errors import ConfigurationError
from services.worker import demo
from services.worker.registry import HandlerContext, collect_handlers, handler

CONTEXT = HandlerContext(job_id=1, execution_id="ex-1", attempt=1, trigger_time=0)

ModuleWriter = Callable[[str, str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleWriter]:
    """Write a handler module under a name unique to the test; forget it afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(suffix: str, source: str) -> str:
        name = f"kairos_unit_{tmp_path.name}_{suffix}".replace("-", "_")
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_handler_returns_the_function_itself() -> None:
    def greet(params: dict[str, Any], ctx: HandlerContext) -> str:
        return f"hello {params['who']} from {ctx.execution_id}"

    marked = handler("greet")(greet)
    assert marked is greet
    assert marked({"who": "ops"}, CONTEXT) == "hello ops from ex-1"


def test_collects_every_demo_handler_by_name() -> None:
    assert collect_handlers(["services.worker.demo"]) == {
        "demo.noop": demo.noop,
        "demo.echo": demo.echo,
        "demo.sleep": demo.sleep,
        "demo.fail": demo.fail,
        "demo.log": demo.log_lines,
    }


def test_collected_handler_runs_with_params_and_context() -> None:
    echo = collect_handlers(["services.worker.demo"])["demo.echo"]
    assert echo({"n": 1}, CONTEXT) == {"n": 1}


def test_no_modules_give_no_handlers() -> None:
    assert collect_handlers([]) == {}


def test_unimportable_module_raises_configuration_error() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("services.worker.no_such_module")
    ) as caught:
        collect_handlers(["services.worker.demo", "services.worker.no_such_module"])
    assert isinstance(caught.value.__cause__, ImportError)


def test_module_whose_import_fails_raises_configuration_error(write_module: ModuleWriter) -> None:
    name = write_module("broken", "import kairos_unit_module_that_does_not_exist\n")
    with pytest.raises(ConfigurationError, match=re.escape(name)):
        collect_handlers([name])


@pytest.mark.parametrize("source", ["def broken(:\n", "raise RuntimeError('settings missing')\n"])
def test_module_that_fails_while_loading_raises_configuration_error(
    write_module: ModuleWriter, source: str
) -> None:
    name = write_module("fails", source)
    with pytest.raises(ConfigurationError, match=re.escape(name)):
        collect_handlers([name])


def test_unmarked_functions_are_not_collected(write_module: ModuleWriter) -> None:
    name = write_module(
        "mixed",
        """
        from services.worker.registry import handler

        @handler("mixed.marked")
        def marked(params, ctx):
            return 1

        def helper(params, ctx):
            return 2
        """,
    )
    assert list(collect_handlers([name])) == ["mixed.marked"]


def test_same_name_in_two_modules_raises_configuration_error(write_module: ModuleWriter) -> None:
    source = """
        from services.worker.registry import handler

        @handler("demo.echo")
        def echo_again(params, ctx):
            return params
        """
    name = write_module("clash", source)
    with pytest.raises(ConfigurationError, match=re.escape("'demo.echo' is registered twice")):
        collect_handlers(["services.worker.demo", name])


def test_a_handler_imported_into_another_module_counts_once(write_module: ModuleWriter) -> None:
    name = write_module("reexport", "from services.worker.demo import echo\n")
    handlers = collect_handlers(["services.worker.demo", name])
    assert handlers["demo.echo"] is demo.echo
    assert len(handlers) == 5


@pytest.mark.parametrize(
    "source",
    [
        "def report(params, ctx):\n    yield params\n",
        "async def report(params, ctx):\n    yield params\n",
    ],
)
def test_a_generator_handler_is_refused_at_registration(
    write_module: ModuleWriter, source: str
) -> None:
    body = "from services.worker.registry import handler\n\n@handler('gen.report')\n" + source
    name = write_module("generator", body)
    with pytest.raises(ConfigurationError, match=r"'gen\.report'.*generator.*return"):
        collect_handlers([name])


def test_a_coroutine_handler_is_collected(write_module: ModuleWriter) -> None:
    source = """
        from services.worker.registry import handler

        @handler("co.report")
        async def report(params, ctx):
            return params
        """
    assert list(collect_handlers([write_module("coroutine", source)])) == ["co.report"]


@pytest.mark.parametrize("seconds", [9e9, 61, -1, float("nan"), float("inf"), "soon", True])
def test_demo_sleep_refuses_what_it_does_not_sleep(
    seconds: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    with pytest.raises(demo.DemoFailure, match="between 0 and 60 seconds"):
        demo.sleep({"seconds": seconds}, CONTEXT)
    assert slept == []


def test_demo_sleep_sleeps_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert demo.sleep({"seconds": 60}, CONTEXT) == {"slept": 60.0}
    assert demo.sleep({}, CONTEXT) == {"slept": 1.0}
    assert slept == [60.0, 1.0]
