"""Threads (mstar.utils.threads): the masks of Thread's and ThreadPool's threads, and pin_thread's warm-up order.

Each test installs a plan whose mask is the machine's first two CPUs {a, b} and starts its
threads from a creator pinned to {b} alone, so a thread that merely inherited its creator's
mask would be seen on {b}. Masks are read with os.sched_getaffinity(0) inside the threads.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, FrozenSet, List, Tuple

import pytest

import cpuplan
from cpuplan import HookPlan, StepCpus, Thread, ThreadPool


def mask() -> FrozenSet[int]:
    """The calling thread's CPUs."""
    return frozenset(os.sched_getaffinity(0))


def in_thread(fn: Callable[[], object]) -> object:
    """fn's result, run in a plain new thread (so that mask changes never touch the test's thread)."""
    out: Dict[str, object] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]


@pytest.fixture
def ab(two_cpus: Tuple[int, int]) -> Tuple[int, int]:
    """The two CPUs, with a plan installed whose mask is both: worker 0 on b, the API server on a."""
    a, b = two_cpus
    cpuplan.install(
        HookPlan(
            frozenset({a, b}), 2, (StepCpus(frozenset({b}), "worker 0 on b"), None), a, "test plan", "auto", ("0000:2a:00.0", "0000:3a:00.0"), StepCpus(frozenset({a}), "api on a")
        )
    )
    return a, b


def test_pin_thread_goes_back_to_the_process_mask_warms_up_then_moves(ab: Tuple[int, int]) -> None:
    a, b = ab

    def body() -> List[Tuple[str, FrozenSet[int]]]:
        os.sched_setaffinity(0, {a})  # the thread starts confined elsewhere
        seen = [("before", mask())]
        cpuplan.pin_thread_warm({b}, {a, b}, lambda: seen.append(("warm", mask())))
        seen.append(("after", mask()))
        return seen

    assert in_thread(body) == [("before", frozenset({a})), ("warm", frozenset({a, b})), ("after", frozenset({b}))]


def test_pin_threads_default_warm_up_is_one_torch_op_as_wide_as_the_pool(ab: Tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = ab
    calls: List[Tuple[object, ...]] = []

    class Tensor:
        def sum(self) -> None:
            calls.append(("sum", mask()))

    torch = types.ModuleType("torch")
    torch.get_num_threads = lambda: 6  # type: ignore[attr-defined]
    torch.ones = lambda *shape: calls.append(("ones", shape)) or Tensor()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)

    def body() -> FrozenSet[int]:
        os.sched_setaffinity(0, {b})
        cpuplan.pin_thread({b}, {a, b})
        return mask()

    assert in_thread(body) == frozenset({b})
    assert calls == [("ones", (6, 1 << 15)), ("sum", frozenset({a, b}))]


def test_pin_thread_refuses_cpus_outside_the_mask_and_stays_put(ab: Tuple[int, int]) -> None:
    a, b = ab

    def body() -> FrozenSet[int]:
        os.sched_setaffinity(0, {a})
        with pytest.raises(ValueError, match="not all in the process mask"):
            cpuplan.pin_thread({a, b}, {a})
        with pytest.raises(ValueError, match="empty"):
            cpuplan.pin_thread(set(), {a, b})
        return mask()

    assert in_thread(body) == frozenset({a})


def test_pin_thread_reports_cpus_the_kernel_does_not_grant(ab: Tuple[int, int]) -> None:
    a, b = ab
    offline = max(os.cpu_count() or 1, 8190)  # no such CPU: the kernel keeps only a and b

    def body() -> None:
        cpuplan.pin_thread({b, offline}, {a, b, offline})

    with pytest.raises(OSError, match="the kernel allows only"):
        in_thread(body)


def test_thread_runs_on_the_process_mask_whatever_its_creators(ab: Tuple[int, int]) -> None:
    a, b = ab

    class Override(Thread):
        def run(self) -> None:  # does not call super().run()
            self.seen = mask()

    class Mixin:
        def run(self) -> None:
            self.seen = mask()  # type: ignore[attr-defined]

    class Mixed(Mixin, Thread):
        pass

    def body() -> Dict[str, FrozenSet[int]]:
        os.sched_setaffinity(0, {b})
        seen: Dict[str, FrozenSet[int]] = {}
        plain = threading.Thread(target=lambda: seen.update(plain=mask()))
        target = Thread(target=lambda: seen.update(target=mask()))
        override, mixed = Override(), Mixed()
        for t in (plain, target, override, mixed):
            t.start()
            t.join()
        seen.update(override=override.seen, mixed=mixed.seen, creator=mask())  # type: ignore[attr-defined]
        return seen

    assert in_thread(body) == {
        "plain": frozenset({b}),  # a plain thread inherits its creator's mask: what Thread fixes
        "target": frozenset({a, b}),
        "override": frozenset({a, b}),
        "mixed": frozenset({a, b}),
        "creator": frozenset({b}),
    }


def test_calling_run_directly_stays_on_the_callers_thread_and_mask(ab: Tuple[int, int]) -> None:
    a, b = ab

    class Recorder(Thread):
        def __init__(self, me: threading.Thread) -> None:
            super().__init__()
            self.me = me
            self.seen: List[Tuple[str, FrozenSet[int]]] = []

        def run(self) -> None:
            self.seen.append(("caller" if threading.current_thread() is self.me else "thread", mask()))

    def body() -> List[Tuple[str, FrozenSet[int]]]:
        os.sched_setaffinity(0, {b})
        t = Recorder(threading.current_thread())
        t.run()
        t.start()
        t.join()
        t.run()  # after start too
        t.seen.append(("after", mask()))
        with pytest.raises(RuntimeError):
            t.start()
        t.run()  # and after a refused start
        return t.seen

    assert in_thread(body) == [
        ("caller", frozenset({b})),
        ("thread", frozenset({a, b})),
        ("caller", frozenset({b})),
        ("after", frozenset({b})),
        ("caller", frozenset({b})),
    ]


def test_thread_pool_threads_reach_the_process_mask_before_the_initializer(ab: Tuple[int, int]) -> None:
    a, b = ab

    def body() -> Dict[str, object]:
        os.sched_setaffinity(0, {b})
        seen: Dict[str, object] = {}

        def init(tag: str) -> None:
            seen[tag] = mask()

        with ThreadPool(max_workers=2, thread_name_prefix="cp", initializer=init, initargs=("init",)) as pool:
            seen["tasks"] = set(pool.map(lambda _: mask(), range(8)))
            seen["name"] = pool.submit(lambda: threading.current_thread().name).result()
        with ThreadPool(max_workers=1) as bare:
            seen["bare"] = bare.submit(mask).result()
        with ThreadPoolExecutor(max_workers=1) as plain:
            seen["plain"] = plain.submit(mask).result()
        return seen

    seen = in_thread(body)
    assert seen["init"] == frozenset({a, b})
    assert seen["tasks"] == {frozenset({a, b})}
    assert str(seen["name"]).startswith("cp")
    assert seen["bare"] == frozenset({a, b})
    assert seen["plain"] == frozenset({b})  # the stdlib pool inherits the submitter's mask
    with pytest.raises(TypeError):
        ThreadPool(initializer="not callable")  # type: ignore[arg-type]


def test_the_process_mask_without_an_installed_plan_is_the_processes(two_cpus: Tuple[int, int]) -> None:
    a, b = two_cpus
    assert cpuplan.plan().mask == cpuplan.process_mask() == frozenset(os.sched_getaffinity(0))

    def body() -> FrozenSet[int]:
        os.sched_setaffinity(0, {b})
        t = Thread(target=lambda: seen.append(mask()))
        t.start()
        t.join()
        return seen[0]

    seen: List[FrozenSet[int]] = []
    assert in_thread(body) == cpuplan.plan().mask


def test_pin_worker_and_pin_result_follow_the_plan(ab: Tuple[int, int]) -> None:
    a, b = ab

    def body() -> List[object]:
        out: List[object] = []
        os.sched_setaffinity(0, {a})
        w = cpuplan.pin_worker("cuda:0", warm=lambda: out.append(("warm", mask())))
        out += [w, mask()]
        out.append(cpuplan.pin_worker("00000000:3A:00.0"))  # unpinned worker 1: nothing moves
        out.append(mask())
        out.append(cpuplan.pin_worker("0000:18:00.0"))  # not a worker of the plan
        out.append(cpuplan.pin_result())
        out.append(mask())
        return out

    assert in_thread(body) == [
        ("warm", frozenset({a, b})),
        cpuplan.Worker(0, "0000:2a:00.0", frozenset({b}), "worker 0 on b"),
        frozenset({b}),
        cpuplan.Worker(1, "0000:3a:00.0", None, "test plan"),
        frozenset({b}),
        None,
        frozenset({a}),
        frozenset({a}),
    ]


def test_to_process_mask_moves_the_calling_thread(ab: Tuple[int, int]) -> None:
    a, b = ab

    def body() -> Tuple[FrozenSet[int], FrozenSet[int]]:
        os.sched_setaffinity(0, {a})
        before = mask()
        cpuplan.to_process_mask()
        return before, mask()

    assert in_thread(body) == (frozenset({a}), frozenset({a, b}))
