"""cpuplan.cpus and cpuplan.threads against the seed's documentation (mstar.utils.cpus, mstar.utils.threads), name for name.

The tables below are the seed's API reference transcribed: every function, class, method,
property, attribute and exception it documents, each signature as the reference prints it
(parameter names in order, the keyword-only marker, defaults as written, with a module-level
default such as ``_PCI_DEVICES`` looked up in the module), each parameter's and return's type
as it lists them, and each one-line summary. The package is compared with inspect.signature,
the dataclass fields and the docstrings, so an added parameter, a renamed keyword, another
default or another return type fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import threading
import typing
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Dict, List, Optional, Tuple

import pytest

from cpuplan import cpus, threads

# The seed's module pages list these names and no others (cpus: Functions, Classes, Exceptions).
CPUS_NAMES = {
    "cgroup_cpu_quota",
    "claim_gpus",
    "deployment_plan",
    "device_addresses",
    "devices_plan",
    "format_cpu_list",
    "host_gpus",
    "install",
    "parse_cpu_list",
    "plan",
    "process_mask",
    "smt_siblings",
    "usable_cpus",
    "CpuPlan",
    "HostGpu",
    "StepCpus",
    "CpuPlanError",
}
THREADS_NAMES = {"pin_thread", "Thread", "ThreadPool"}

# (module, name, signature as documented, {parameter: type}, return type, one-line summary)
FUNCTIONS: List[Tuple[ModuleType, str, str, Dict[str, str], Optional[str], str]] = [
    (
        cpus,
        "cgroup_cpu_quota",
        "(root=_CGROUP_ROOT, proc_cgroup='/proc/self/cgroup')",
        {"root": "Path", "proc_cgroup": "str"},
        "float | None",
        "The tightest cgroup v2 cpu.max quota over this process's cgroup and its ancestors, in CPUs; None when no level sets one (or cgroup v2 is absent).",
    ),
    (
        cpus,
        "claim_gpus",
        "(addresses)",
        {"addresses": "Iterable[str | None]"},
        "str | None",
        "Hold a lock on each GPU for the life of this process; if one can't be had, hold none of them and say why.",
    ),
    (
        cpus,
        "deployment_plan",
        "(setting, addresses, *, mask=None, usable=None, pci_root=_PCI_DEVICES, siblings=smt_siblings)",
        {
            "setting": "str | int",
            "addresses": "Sequence[str | None]",
            "mask": "Collection[int] | None",
            "usable": "int | None",
            "pci_root": "Path",
            "siblings": "Callable[[int], frozenset[int]]",
        },
        "CpuPlan",
        "The plan for a deployment whose workers' devices sit at PCI addresses, in the conductor's worker order (None for a device sysfs doesn't place, such as a CPU worker; only auto reads them).",
    ),
    (
        cpus,
        "device_addresses",
        "(devices)",
        {"devices": "Sequence[str]"},
        "list[str | None]",
        "The PCI address of each worker's device (cuda:1); None for a CPU worker, or where the platform doesn't report one.",
    ),
    (
        cpus,
        "devices_plan",
        "(setting, devices)",
        {"setting": "str | int", "devices": "Sequence[str]"},
        "CpuPlan",
        "deployment_plan for the workers' device strings, in the conductor's worker order: the same call in the API server and in every worker.",
    ),
    (cpus, "format_cpu_list", "(cpus)", {"cpus": "Iterable[int]"}, "str", "cpus as ranges, the inverse of parse_cpu_list."),
    (
        cpus,
        "host_gpus",
        "(like, root=_PCI_DEVICES)",
        {"like": "str", "root": "Path"},
        "list[HostGpu]",
        "The host's GPUs in PCI address order: the functions with the vendor and class of the device at like (0000:40:00.0).",
    ),
    (cpus, "install", "(new)", {"new": "CpuPlan | None"}, "None", "Make new this process's plan (None: back to nothing pinned)."),
    (
        cpus,
        "parse_cpu_list",
        "(text)",
        {"text": "str"},
        "frozenset[int]",
        "The CPUs in a list such as 0-3,8,10-11 (as sysfs and taskset write them); empty for an empty string.",
    ),
    (cpus, "plan", "(refresh=False)", {"refresh": "bool"}, "CpuPlan", "This process's plan: the one install set, else nothing pinned."),
    (cpus, "process_mask", "()", {}, "frozenset[int]", "The CPUs this process may run on; every CPU where affinity is unknown."),
    (cpus, "smt_siblings", "(cpu)", {"cpu": "int"}, "frozenset[int]", "The hardware threads of cpu's core, cpu included."),
    (
        cpus,
        "usable_cpus",
        "()",
        {},
        "int",
        "CPUs this process may run on (its affinity, else os.cpu_count()), capped by the cgroup quota rounded down.",
    ),
    # The seed lists no parameter types for pin_thread, only its return type.
    (threads, "pin_thread", "(cpus, process_mask)", {}, "None", "Confine the calling thread to cpus."),
]

# (module, name, constructor signature, {parameter: type}, base, one-line summary)
CLASSES: List[Tuple[ModuleType, str, str, Dict[str, str], type, str]] = [
    (
        cpus,
        "CpuPlan",
        "(mask, usable, workers=(), result=None, why='step_thread_core off')",
        {"mask": "frozenset[int]", "usable": "int", "workers": "tuple[StepCpus | None, ...]", "result": "int | None", "why": "str"},
        object,
        "See the module docstring.",
    ),
    (
        cpus,
        "HostGpu",
        "(address, node, local)",
        {"address": "str", "node": "str | None", "local": "frozenset[int] | None"},
        tuple,
        "One of the host's GPUs as sysfs lists it: its PCI address, NUMA node and the node's CPUs (None where sysfs doesn't say).",
    ),
    (
        cpus,
        "StepCpus",
        "(cpus, why)",
        {"cpus": "frozenset[int]", "why": "str"},
        tuple,
        "The CPUs one worker's main, GPU and plan threads share (one core's hardware threads in the mask), and how they were chosen, for the log.",
    ),
    (
        threads,
        "Thread",
        "(group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None)",
        {},
        threading.Thread,
        "A threading.Thread that runs on the process mask, whatever its creator's and whatever its run is: a target, an override that doesn't call super().run(), a mixin's.",
    ),
    (
        threads,
        "ThreadPool",
        "(max_workers=None, thread_name_prefix='', initializer=None, initargs=())",
        {"max_workers": "int | None", "thread_name_prefix": "str", "initializer": "Callable[..., object] | None", "initargs": "tuple"},
        ThreadPoolExecutor,
        "A ThreadPoolExecutor whose threads run on the process mask before initializer, whatever the mask of the thread that started them.",
    ),
]

# CpuPlan's properties and their types; its attributes (dataclass fields) with their types and defaults.
PROPERTIES = {
    "copy_workers": "int",
    "encode_workers": "int",
    "left": "int",
    "pinned": "frozenset[int]",
    "png_threads": "int",
    "preprocess_threads": "int",
}
NO_DEFAULT = object()
ATTRIBUTES = [
    ("mask", "frozenset[int]", NO_DEFAULT),
    ("usable", "int", NO_DEFAULT),
    ("workers", "tuple[StepCpus | None, ...]", ()),
    ("result", "int | None", None),
    ("why", "str", "step_thread_core off"),
]


def documented(module: ModuleType, signature: str) -> List[Tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter of a signature as the reference prints it; a default that is a name is the module's attribute."""
    args = ast.parse(f"def f{signature}: pass").body[0].args  # type: ignore[attr-defined]

    def value(node: Optional[ast.expr]) -> object:
        if node is None:
            return inspect.Parameter.empty
        if isinstance(node, ast.Name):
            return getattr(module, node.id)
        return ast.literal_eval(node)

    positional = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, value(d)) for a, d in zip(args.args, positional)]
    out += [(a.arg, inspect.Parameter.KEYWORD_ONLY, value(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return out


def actual(sig: inspect.Signature) -> List[Tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter of a signature."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def text(annotation: object) -> str:
    """An annotation as written in the source (the package keeps them as strings)."""
    if isinstance(annotation, typing.ForwardRef):
        return annotation.__forward_arg__
    assert isinstance(annotation, str), f"annotation {annotation!r} is not kept as written"
    return annotation


def summary(obj: object) -> str:
    """The first line of obj's docstring."""
    return (inspect.getdoc(obj) or "").splitlines()[0]


def test_the_modules_hold_the_seeds_names_and_no_other_public_one() -> None:
    assert set(cpus.__all__) == CPUS_NAMES
    assert set(threads.__all__) == THREADS_NAMES
    for module, names in ((cpus, CPUS_NAMES), (threads, THREADS_NAMES)):
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"
    assert {f[1] for f in FUNCTIONS if f[0] is cpus} | {c[1] for c in CLASSES if c[0] is cpus} | {"CpuPlanError"} == CPUS_NAMES
    assert {f[1] for f in FUNCTIONS if f[0] is threads} | {c[1] for c in CLASSES if c[0] is threads} == THREADS_NAMES


@pytest.mark.parametrize("module,name,signature,types,returns,doc", FUNCTIONS, ids=[f[1] for f in FUNCTIONS])
def test_functions_have_the_seeds_signature(module: ModuleType, name: str, signature: str, types: Dict[str, str], returns: str, doc: str) -> None:
    fn = getattr(module, name)
    sig = inspect.signature(fn)
    assert actual(sig) == documented(module, signature)
    for param, annotation in types.items():
        assert text(sig.parameters[param].annotation) == annotation, (name, param)
    assert text(sig.return_annotation) == returns
    assert summary(fn).startswith(doc)


@pytest.mark.parametrize("module,name,signature,types,base,doc", CLASSES, ids=[c[1] for c in CLASSES])
def test_classes_have_the_seeds_constructor_and_base(module: ModuleType, name: str, signature: str, types: Dict[str, str], base: type, doc: str) -> None:
    cls = getattr(module, name)
    sig = inspect.signature(cls)
    assert actual(sig) == documented(module, signature)
    for param, annotation in types.items():
        assert text(sig.parameters[param].annotation) == annotation, (name, param)
    assert cls.__bases__ == (base,)
    assert summary(cls).startswith(doc)


def test_named_tuples_are_named_tuples_with_the_seeds_fields() -> None:
    for cls, fields in ((cpus.HostGpu, ("address", "node", "local")), (cpus.StepCpus, ("cpus", "why"))):
        assert cls._fields == fields
        assert typing.NamedTuple in getattr(cls, "__orig_bases__", ())


def test_cpu_plan_properties_and_attributes() -> None:
    for name, annotation in PROPERTIES.items():
        prop = inspect.getattr_static(cpus.CpuPlan, name)
        assert isinstance(prop, property), name
        assert text(inspect.signature(prop.fget).return_annotation) == annotation, name
        assert prop.fset is None and prop.__doc__, name
    assert dataclasses.is_dataclass(cpus.CpuPlan)
    fields = dataclasses.fields(cpus.CpuPlan)
    assert [(f.name, text(f.type)) for f in fields] == [(n, t) for n, t, _ in ATTRIBUTES]
    for f, (_, _, default) in zip(fields, ATTRIBUTES):
        assert f.default == (dataclasses.MISSING if default is NO_DEFAULT else default), f.name
    # A plain dataclass: assignable, compared by value (so unhashable), as the seed's.
    params = getattr(cpus.CpuPlan, "__dataclass_params__")
    assert (params.frozen, params.eq) == (False, True)
    assert cpus.CpuPlan.__hash__ is None


def test_thread_start_and_the_exception() -> None:
    start = inspect.signature(threads.Thread.start)
    assert list(start.parameters) == ["self"] and text(start.return_annotation) == "None"
    assert summary(threads.Thread.start) == "Start the thread's activity."
    assert cpus.CpuPlanError.__bases__ == (ValueError,)
    assert cpus.CpuPlanError.__doc__ == "A step_thread_core value the process mask can't honour."
    assert f"{cpus.CpuPlanError.__module__}.{cpus.CpuPlanError.__qualname__}" == "cpuplan.cpus.CpuPlanError"


def test_the_top_level_package_has_the_seeds_objects_themselves() -> None:
    import cpuplan

    for name in CPUS_NAMES:
        assert getattr(cpuplan, name) is getattr(cpus, name), name
    for name in THREADS_NAMES:
        assert getattr(cpuplan, name) is getattr(threads, name), name
