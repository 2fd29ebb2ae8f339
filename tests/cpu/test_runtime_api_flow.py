"""From the public API to run_variant, on CPU tensors (needs torch): what each call hands
the runner for discrete weights, the dynamic scheduler and a 2x1 cluster.

Stand-ins: the shared ones (stand_ins: an H200, no device check, since the tensors live
on the CPU) over a hand-written artifact directory, and load_variant / run_variant recording their arguments instead of loading
and launching.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, variant_name, write_artifacts  # noqa: E402
import dglu  # noqa: E402
from dglu import api, bound, call, driver, op  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.errors import VariantNotFoundError  # noqa: E402
from dglu.runner import LoadedVariant  # noqa: E402

M, N, K, L = 1024, 96, 200, 4
KEYS = [
    variant_key(),
    variant_key(scheduler="dynamic"),
    variant_key(cluster_m=2),
    variant_key(weight_mode="discrete", b_major="k"),
    variant_key(weight_mode="discrete", b_major="n", dbias=False),
]


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """(variant name, problem) of each run_variant call the API makes."""
    write_artifacts(tmp_path, KEYS)
    stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    records: list[tuple] = []
    for module in (op, bound):
        monkeypatch.setattr(module, "load_variant", lambda v, device: LoadedVariant(v, device, ()))
    monkeypatch.setattr(
        bound,
        "run_variant",
        lambda loaded, problem, *args: records.append((loaded.variant.name, problem)),
    )
    return records


def tensors() -> dict[str, object]:
    return dict(
        a_tensor=torch.zeros(M, K, 1, dtype=torch.bfloat16),
        c_tensor=torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16),
        padded_offsets=torch.tensor([256, 256, 768, 1024], dtype=torch.int32),
        alpha_tensor=torch.ones(L),
        beta_tensor=torch.ones(L),
        prob_tensor=torch.ones(M, 1, 1),
        dprob_tensor=torch.zeros(M, 1, 1),
    )


def test_a_plain_call_runs_the_dense_static_one_cta_variant(runs) -> None:
    b = torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0)
    api.grouped_gemm_dglu_wrapper_sm90(**tensors(), b_tensor=b, generate_dbias=True)
    ((name, problem),) = runs
    assert name == variant_name(KEYS[0])
    assert problem.tensors["b"].pointer == b.data_ptr()
    assert "b_ptrs" not in problem.tensors and "b_expert" not in problem.tensors


@pytest.mark.parametrize(
    ("options", "key"),
    [({"use_dynamic_sched": True}, KEYS[1]), ({"cluster_shape_mn": (2, 1)}, KEYS[2])],
    ids=["dynamic", "cluster"],
)
def test_scheduler_and_cluster_arguments_pick_their_variant(runs, options, key) -> None:
    b = torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0)
    api.grouped_gemm_dglu_wrapper_sm90(**tensors(), b_tensor=b, generate_dbias=True, **options)
    assert [name for name, _ in runs] == [variant_name(key)]


@pytest.mark.parametrize(
    ("b_major", "dbias", "strides", "key"),
    [("k", True, (K, 1, N * K), KEYS[3]), ("n", False, (1, N, N * K), KEYS[4])],
    ids=["k", "n"],
)
def test_wrapper_hands_the_runner_b_ptrs_and_the_expert_template(
    runs, b_major, dbias, strides, key
) -> None:
    b_ptrs = torch.arange(1, L + 1, dtype=torch.int64) << 20
    out = api.grouped_gemm_dglu_wrapper_sm90(
        **tensors(),
        b_ptrs=b_ptrs,
        n=N,
        b_dtype=torch.bfloat16,
        b_major=b_major,
        generate_dbias=dbias,
    )
    ((name, problem),) = runs
    assert name == variant_name(key)
    assert [problem.scalars[s] for s in 'mnkl'] == [M, N, K, L]
    assert "b" not in problem.tensors
    assert problem.tensors["b_ptrs"].pointer == b_ptrs.data_ptr()
    template = problem.tensors["b_expert"]
    assert (template.shape, template.strides) == ((N, K, 1), strides)
    assert problem.tensors["d_row"].pointer == out["d_row_tensor"].data_ptr()
    assert out["d_row_tensor"].shape == (M, 2 * N, 1)
    assert (out["dbias_tensor"] is not None) == dbias
    if dbias:
        assert out["dbias_tensor"].shape == (L, 2 * N, 1)
    assert b_ptrs.tolist() == [(g + 1) << 20 for g in range(L)]  # never written


def test_class_api_builds_and_executes_a_discrete_op(runs) -> None:
    t = tensors()
    d_row = torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16)
    dbias = torch.zeros(L, 2 * N, 1, dtype=torch.bfloat16)
    op = api.GroupedGemmDgluSm90(
        sample_a=t["a_tensor"],
        sample_c=t["c_tensor"],
        sample_d_row=d_row,
        sample_padded_offsets=t["padded_offsets"],
        sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"],
        sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"],
        sample_dbias=dbias,
        num_experts=L,
        b_shape=(N, K),
        b_dtype=torch.bfloat16,
    )
    assert op.check_support() and op.variant_name == variant_name(KEYS[3])
    b_ptrs = torch.zeros(L, dtype=torch.int64)
    op.execute(**t, d_row_tensor=d_row, dbias_tensor=dbias, b_ptrs=b_ptrs)
    ((name, problem),) = runs
    assert name == variant_name(KEYS[3])
    assert problem.tensors["b_ptrs"].pointer == b_ptrs.data_ptr()
    assert problem.tensors["dbias"].pointer == dbias.data_ptr()
    assert problem.tensors["b_expert"].shape == (N, K, 1)


def dense_call(**changes: object) -> dict[str, object]:
    b = torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0)
    return {**tensors(), "b_tensor": b, "generate_dbias": True, **changes}


def test_offsets_are_read_back_only_when_asked(runs, monkeypatch) -> None:
    """Malformed offsets pass by default (the kernels clamp them); DGLU_CHECK_OFFSETS=1
    reads them back and refuses them before anything runs."""
    bad = torch.tensor([512, 256, 768, 1024], dtype=torch.int32)
    monkeypatch.delenv(call.CHECK_OFFSETS_ENV, raising=False)
    api.grouped_gemm_dglu(**dense_call(padded_offsets=bad))
    assert len(runs) == 1
    monkeypatch.setenv(call.CHECK_OFFSETS_ENV, "1")
    with pytest.raises(ValueError, match=r"padded_offsets: entry 1 = 256 is smaller than entry 0 = 512"):
        api.grouped_gemm_dglu(**dense_call(padded_offsets=bad))
    assert len(runs) == 1


def test_a_repeated_call_reuses_its_checks_and_new_tensors_are_checked(runs, monkeypatch) -> None:
    arguments = dense_call()
    api.grouped_gemm_dglu(**arguments)
    checked = []
    original = bound.describe_tensors
    monkeypatch.setattr(bound, "describe_tensors", lambda *a: checked.append(1) or original(*a))
    api.grouped_gemm_dglu(**arguments)
    assert checked == [] and len(runs) == 2
    with pytest.raises(ValueError, match=r"prob_tensor: shape \(512, 1, 1\)"):
        api.grouped_gemm_dglu(**{**arguments, "prob_tensor": torch.ones(512, 1, 1)})
    assert checked == [1] and len(runs) == 2


def test_seed_names_are_the_arch_neutral_implementation() -> None:
    assert api.grouped_gemm_dglu_wrapper_sm90 is api.grouped_gemm_dglu
    assert api.grouped_gemm_dglu_wrapper_sm100 is api.grouped_gemm_dglu
    assert issubclass(api.GroupedGemmDgluSm90, api.GroupedGemmDglu)
    assert issubclass(api.GroupedGemmDgluSm100, api.GroupedGemmDglu)


@pytest.mark.parametrize(
    ("capability", "needed"),
    [((8, 0), "cubins dglu can build"), ((10, 0), "sm_100a cubins"), ((10, 3), "sm_103a cubins")],
)
def test_an_uncovered_architecture_names_device_capability_and_cover(
    runs, monkeypatch, capability, needed
) -> None:
    device = driver.DeviceInfo(0, "NVIDIA Test GPU", capability, 100, 232_448)
    monkeypatch.setattr(call, "device_info", lambda index: device)
    with pytest.raises(VariantNotFoundError) as raised:
        api.GroupedGemmDgluSm100(**samples()).check_support()
    message = str(raised.value)
    assert "cuda:0 (NVIDIA Test GPU, compute capability %d.%d)" % capability in message
    assert f"needs {needed}; none are installed" in message
    assert "they cover sm_90a" in message and runs == []


def samples() -> dict[str, object]:
    t = tensors()
    return dict(
        sample_a=t["a_tensor"],
        sample_c=t["c_tensor"],
        sample_d_row=torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16),
        sample_padded_offsets=t["padded_offsets"],
        sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"],
        sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"],
        sample_b=torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0),
    )


class DlpackOnly:
    """A foreign array: only the DLPack protocol, over a torch tensor's memory."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor

    def __dlpack__(self, **kwargs: object) -> object:
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._tensor.__dlpack_device__()


def test_dlpack_arrays_are_used_without_copies(runs) -> None:
    arguments = dense_call()
    foreign = {name: DlpackOnly(arguments[name]) for name in ("c_tensor", "prob_tensor")}
    api.grouped_gemm_dglu(**{**arguments, **foreign})
    ((_, problem),) = runs
    assert problem.tensors["c"].pointer == arguments["c_tensor"].data_ptr()
    assert problem.tensors["prob"].pointer == arguments["prob_tensor"].data_ptr()


def test_the_wrapper_runs_one_cached_bound_op_per_configuration(runs, monkeypatch) -> None:
    """The wrapper's single call path: the launch of a BoundOp selected once per
    configuration, element types and device, then reused (no class-API object)."""
    ops, selections = [], []
    original_run, original_select = bound.BoundOp._launch, bound.select
    monkeypatch.setattr(
        bound.BoundOp, "_launch", lambda self, *a, **k: ops.append(self) or original_run(self, *a, **k)
    )
    monkeypatch.setattr(bound, "select", lambda *a: selections.append(1) or original_select(*a))
    api.grouped_gemm_dglu(**dense_call())
    api.grouped_gemm_dglu(**dense_call())
    api.grouped_gemm_dglu(**dense_call(use_dynamic_sched=True))
    first, again, dynamic = ops
    assert isinstance(first, bound.BoundOp) and first is again and dynamic is not first
    assert (first.variant.name, dynamic.variant.name) == (
        variant_name(KEYS[0]),
        variant_name(KEYS[1]),
    )
    assert len(selections) == 2 and [name for name, _ in runs] == [
        variant_name(KEYS[0]),
        variant_name(KEYS[0]),
        variant_name(KEYS[1]),
    ]

@pytest.mark.parametrize(
    "options", [{}, {"use_dynamic_sched": True}, {"cluster_shape_mn": (2, 1)}], ids=["plain", "dynamic", "cluster"]
)
def test_wrapper_variant_names_what_the_wrapper_runs_and_runs_nothing(runs, options) -> None:
    b = torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0)
    arguments = {**tensors(), "b_tensor": b, "generate_dbias": True, **options}
    named = dglu.wrapper_variant(**arguments)
    assert runs == []
    api.grouped_gemm_dglu_wrapper_sm90(**arguments)
    assert [name for name, _ in runs] == [named]
    with pytest.raises(TypeError, match=r"takes grouped_gemm_dglu's arguments by name; got \['b'\]"):
        dglu.wrapper_variant(**arguments, b=b)
