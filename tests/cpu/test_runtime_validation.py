"""dglu.validation and the public API's argument checks, on CPU tensors (needs torch).

Every layout check runs before the device check, so a fully valid set of CPU tensors gets
exactly the "expected a CUDA tensor" error: that proves the layout checks passed. The
rules are those of hand-written v2 manifests (conftest_runtime); the driver and device
are the shared stand-ins (stand_ins), with the real device check put back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, variant_name, write_artifacts  # noqa: E402
from dglu import GroupedGemmDgluSm90, call, grouped_gemm_dglu_wrapper_sm90, validation  # noqa: E402
from dglu.call import ARGUMENT_NAMES as NAMES  # noqa: E402
from dglu.dtypes import torch_dtype  # noqa: E402
from dglu.errors import VariantNotFoundError  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.validation import check_offset_values, describe_tensors, element_types  # noqa: E402
from conftest_runtime import bf16_policy  # noqa: E402
from dglu.weights import class_discrete, wrapper_discrete  # noqa: E402

M, N, K, L = 1100, 96, 200, 5
NOT_ON_GPU = "a_tensor: expected a CUDA tensor, got one on cpu"
FLOATS = ("bf16", "fp16", "fp32")
KEYS = [
    *(variant_key(c_dtype=c, d_dtype=d) for c in FLOATS for d in FLOATS),
    variant_key(dbias=False),
    variant_key(act_func="dgeglu"),
    variant_key(scheduler="dynamic", cluster_m=2, dbias=False),
    *(
        variant_key(weight_mode="discrete", b_major=b_major, dbias=dbias)
        for b_major in ("k", "n")
        for dbias in (True, False)
    ),
    variant_key(weight_mode="discrete", b_major="n", dbias=False, scheduler="dynamic"),
]
_real_check_devices = validation._check_devices


@pytest.fixture(autouse=True)
def variants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The KEYS' variants installed (stand-in driver and H200), the device check real."""
    write_artifacts(tmp_path, KEYS)
    stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    monkeypatch.setattr(validation, "_check_devices", _real_check_devices)


def seed_tensors(m=M, n=N, k=K, l=L, b_major="k") -> dict[str, object]:
    """Tensors in the seed's BF16 layouts, by role."""
    b = torch.zeros(l, n, k, dtype=torch.bfloat16).permute(1, 2, 0)
    if b_major == "n":
        b = torch.zeros(l, k, n, dtype=torch.bfloat16).permute(2, 1, 0)
    return {
        "a": torch.zeros(m, k, 1, dtype=torch.bfloat16),
        "b": b,
        "c": torch.zeros(m, 2 * n, 1, dtype=torch.bfloat16),
        "d_row": torch.zeros(m, 2 * n, 1, dtype=torch.bfloat16),
        "padded_offsets": torch.zeros(l, dtype=torch.int32),
        "alpha": torch.ones(l),
        "beta": torch.ones(l),
        "prob": torch.ones(m, 1, 1),
        "dprob": torch.zeros(m, 1, 1),
        "dbias": torch.zeros(l, 2 * n, 1, dtype=torch.bfloat16),
    }


def installed(**key):
    """The installed variant of variant_key(**key)."""
    return next(v for v in call.installed_variants() if v.name == variant_name(variant_key(**key)))


def describe(tensors: dict[str, object], given=None, **key):
    """describe_tensors against the installed variant of variant_key(**key), after the
    element types as the API checks them; ``given``: discrete weights."""
    args = {role: (NAMES[role], t) for role, t in tensors.items()}
    element_types(args)
    return describe_tensors(installed(**key), args, given.given_scalars() if given else None)


def test_valid_layouts_reach_the_device_check() -> None:
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        describe(seed_tensors())


@pytest.mark.parametrize("c_dtype", FLOATS)
@pytest.mark.parametrize("d_dtype", FLOATS)
def test_each_c_and_d_dtype_is_accepted_by_its_variant(c_dtype, d_dtype) -> None:
    tensors = seed_tensors()
    tensors["c"] = tensors["c"].to(torch_dtype(c_dtype))
    tensors["d_row"] = tensors["d_row"].to(torch_dtype(d_dtype))
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        describe(tensors, c_dtype=c_dtype, d_dtype=d_dtype)
    other = "fp32" if c_dtype != "fp32" else "bf16"
    with pytest.raises(ValueError, match=f"^c_tensor: dtype {tensors['c'].dtype} is not accepted"):
        describe(tensors, c_dtype=other, d_dtype=d_dtype)


def test_rank_two_a_and_c_are_accepted() -> None:
    tensors = seed_tensors()
    tensors["a"], tensors["c"] = tensors["a"][:, :, 0], tensors["c"][:, :, 0]
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        describe(tensors)


def test_dense_b_is_k_major() -> None:
    with pytest.raises(ValueError, match=r"^b_tensor: strides \(1, 96, 19200\) differ from"):
        describe(seed_tensors(b_major="n"))


def _misaligned_a() -> object:
    flat = torch.zeros(M * K + 8, dtype=torch.bfloat16)
    return flat[1 : 1 + M * K].view(M, K, 1)


# role -> replacement tensor, expected message start (after the argument name)
BAD = {
    "a not a tensor": (
        "a",
        lambda: [[0.0]],
        TypeError,
        "a_tensor: expected a torch.Tensor, got list",
    ),
    "prob of rank 1": (
        "prob",
        lambda: torch.ones(M),
        ValueError,
        "prob_tensor: expected shape (M, 1, 1), got rank 1",
    ),
    "alpha int32": (
        "alpha",
        lambda: torch.ones(L, dtype=torch.int32),
        ValueError,
        "alpha_tensor: dtype torch.int32 is not accepted; expected one of torch.float32 "
        f"(variant {variant_name(variant_key())})",
    ),
    "alpha float64": (
        "alpha",
        lambda: torch.ones(L, dtype=torch.float64),
        ValueError,
        "alpha_tensor: dtype torch.float64 is not accepted; expected one of torch.bfloat16, "
        "torch.float16, torch.float32, torch.int32, torch.int64",
    ),
    "offsets int64": (
        "padded_offsets",
        lambda: torch.zeros(L, dtype=torch.int64),
        ValueError,
        "padded_offsets: dtype torch.int64 is not accepted; expected one of torch.int32",
    ),
    "dbias fp32": (
        "dbias",
        lambda: torch.zeros(L, 2 * N, 1),
        ValueError,
        "dbias_tensor: dtype torch.float32 is not accepted; expected one of torch.bfloat16",
    ),
    "b fp16": (
        "b",
        lambda: torch.zeros(L, N, K, dtype=torch.float16).permute(1, 2, 0),
        ValueError,
        "b_tensor: dtype torch.float16 is not accepted; expected one of torch.bfloat16",
    ),
    "c float64": (
        "c",
        lambda: torch.zeros(M, 2 * N, 1, dtype=torch.float64),
        ValueError,
        "c_tensor: dtype torch.float64 is not accepted; expected one of torch.bfloat16, "
        "torch.float16, torch.float32, torch.int32, torch.int64",
    ),
    "d_row int8": (
        "d_row",
        lambda: torch.zeros(M, 2 * N, 1, dtype=torch.int8),
        ValueError,
        "d_row_tensor: dtype torch.int8 is not accepted; expected one of torch.bfloat16, "
        "torch.float16, torch.float32, torch.int32, torch.int64",
    ),
    "c too wide": (
        "c",
        lambda: torch.zeros(M, 2 * N + 64, 1, dtype=torch.bfloat16),
        ValueError,
        f"c_tensor: shape ({M}, {2 * N + 64}, 1) does not match (M, 2N, 1) = ({M}, {2 * N}, 1) "
        f"with M={M}, K={K}, N={N}, L={L} (M, K from a_tensor; N, L from b_tensor)",
    ),
    "d_row fewer rows": (
        "d_row",
        lambda: torch.zeros(M - 1, 2 * N, 1, dtype=torch.bfloat16),
        ValueError,
        "d_row_tensor: shape",
    ),
    "beta of another L": (
        "beta",
        lambda: torch.ones(L + 1),
        ValueError,
        f"beta_tensor: shape ({L + 1},) does not match (L,) = ({L},)",
    ),
    "b with the wrong K": (
        "b",
        lambda: torch.zeros(L, N, K + 8, dtype=torch.bfloat16).permute(1, 2, 0),
        ValueError,
        "b_tensor: shape",
    ),
    "b contiguous (N, K, L)": (
        "b",
        lambda: torch.zeros(N, K, L, dtype=torch.bfloat16),
        ValueError,
        f"b_tensor: strides ({K * L}, {L}, 1) differ from the required ({K}, 1, {N * K})",
    ),
    "c transposed": (
        "c",
        lambda: torch.zeros(2 * N, M, dtype=torch.bfloat16).t(),
        ValueError,
        "c_tensor: strides",
    ),
    "a misaligned": ("a", _misaligned_a, ValueError, "a_tensor: data pointer"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tensor_is_named_with_what_it_needs(case: str) -> None:
    role, make, error, message = BAD[case]
    tensors = seed_tensors()
    tensors[role] = make()
    with pytest.raises(error) as raised:
        describe(tensors)
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_of_a_dtype_no_installed_family_runs_is_refused_first() -> None:
    arguments = wrapper_arguments(a_tensor=torch.zeros(M, K, 1, dtype=torch.float16))
    with pytest.raises(VariantNotFoundError, match=r"^a_tensor: dtype torch.float16: no family on sm_90a runs it "
                       r"\(the installed families run torch.bfloat16\); `dglu-build add --arch sm_90a --ab-dtype fp16"):
        grouped_gemm_dglu_wrapper_sm90(**arguments, act_func="nope")  # before the options


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"n": 80}, "b_tensor: N = 80 must be a multiple of 32 (gate/input columns come in "
         "blocks of 32)"),
        ({"k": 204}, "a_tensor: K = 204 must be a multiple of 8 (rows of A span a multiple of "
         "16 bytes)"),
        ({"n": 16}, "b_tensor: N = 16 must be at least 32 and must be a multiple of 32 ("),
        ({"l": 1025, "n": 32, "k": 8}, "b_tensor: L = 1025 must be at most 1024 (the kernels "
         "search at most 1024 experts)"),
    ],
)
def test_limits_name_the_argument_and_why(sizes, message) -> None:
    with pytest.raises(ValueError) as raised:
        describe(seed_tensors(**sizes))
    assert str(raised.value).startswith(message), str(raised.value)


def test_largest_l_and_empty_m_are_fine() -> None:
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        describe(seed_tensors(m=0, l=1024, n=32, k=8))


def test_offset_values() -> None:
    assert check_offset_values("padded_offsets", [256, 256, 768, 1024], 1100, 256) == 1024
    assert check_offset_values("padded_offsets", [0], 0, 256) == 0
    cases = [
        ([256, 300], "entry 1 = 300 is not a multiple of 256"),
        ([512, 256], "entry 1 = 256 is smaller than entry 0 = 512"),
        ([-256, 0], "entry 0 = -256 is smaller than 0"),
        ([256, 1280], "the last entry (valid_m = 1280) exceeds M = 1100"),
    ]
    for values, message in cases:
        with pytest.raises(ValueError) as raised:
            check_offset_values("padded_offsets", values, 1100, 256)
        assert str(raised.value).startswith(f"padded_offsets: {message}"), str(raised.value)


def _common_arguments(t: dict) -> dict[str, object]:
    """The tensor arguments the wrapper and execute() share, from ``seed_tensors()``."""
    return dict(
        a_tensor=t["a"],
        c_tensor=t["c"],
        padded_offsets=t["padded_offsets"],
        alpha_tensor=t["alpha"],
        beta_tensor=t["beta"],
        prob_tensor=t["prob"],
        dprob_tensor=t["dprob"],
    )


def wrapper_arguments(**changes) -> dict[str, object]:
    t = seed_tensors()
    return {**_common_arguments(t), "b_tensor": t["b"], **changes}


def test_wrapper_checks_layouts_then_device() -> None:
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        grouped_gemm_dglu_wrapper_sm90(**wrapper_arguments(act_func="dgeglu", generate_dbias=True))
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        grouped_gemm_dglu_wrapper_sm90(
            **wrapper_arguments(use_dynamic_sched=True, cluster_shape_mn=(2, 1))
        )
    with pytest.raises(ValueError, match="^c_tensor: shape"):
        grouped_gemm_dglu_wrapper_sm90(
            **wrapper_arguments(c_tensor=torch.zeros(M, N, dtype=torch.bfloat16))
        )


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"sfa_tensor": torch.zeros(1)}, NotImplementedError, "sfa_tensor: got a Tensor; block-scaled"),
        (
            {"norm_const_tensor": torch.zeros(1)},
            NotImplementedError,
            "norm_const_tensor: got a Tensor; block-scaled",
        ),
        (
            {"b_ptrs": torch.zeros(L, dtype=torch.int64), "n": N, "b_dtype": torch.bfloat16},
            ValueError,
            "b_tensor and b_ptrs, n, b_dtype: dense and discrete weights exclude each other",
        ),
        ({"b_tensor": None}, ValueError, "b_tensor: required"),
        ({"d_dtype": torch.int8}, ValueError, "d_dtype: expected"),
        ({"generate_dbias": "yes"}, ValueError, "generate_dbias: expected a bool"),
        ({"use_dynamic_sched": "yes"}, ValueError, "use_dynamic_sched: expected a bool"),
        ({"b_major": "n"}, ValueError, "b_major: 'n' applies to discrete weights (b_ptrs) only"),
        ({"cluster_shape_mn": 2}, ValueError, "cluster_shape_mn: expected None or two"),
        (
            {"act_func": "dsituglu", "situ_beta1": -4.0},
            ValueError,
            "situ_beta1: must be positive",
        ),
        ({"d_dtype": torch.float64}, ValueError, "d_dtype: expected torch.bfloat16, torch.float16"),
        ({"acc_dtype": torch.float16}, ValueError, "acc_dtype: must be torch.float32"),
    ],
)
def test_wrapper_refuses_what_it_cannot_honour(changes, error, message) -> None:
    with pytest.raises(error) as raised:
        grouped_gemm_dglu_wrapper_sm90(**wrapper_arguments(**changes))
    assert str(raised.value).startswith(message), str(raised.value)


SAMPLE_ROLES = ("a", "c", "d_row", "padded_offsets", "alpha", "beta", "prob", "dprob")


def samples(t: dict) -> dict[str, object]:
    """The class API's sample arguments every op needs, from ``seed_tensors()``."""
    return {f"sample_{role}": t[role] for role in SAMPLE_ROLES}


def class_op(with_dbias: bool) -> GroupedGemmDgluSm90:
    t = seed_tensors()
    return GroupedGemmDgluSm90(
        **samples(t), sample_dbias=t["dbias"] if with_dbias else None, sample_b=t["b"]
    )


def test_class_refuses_n_major_dense_weights() -> None:
    t = seed_tensors(b_major="n")
    op = GroupedGemmDgluSm90(**samples(t), sample_b=t["b"], b_major="n")
    with pytest.raises(ValueError, match="^b_major: 'n' applies to discrete weights"):
        op.check_support()


def test_class_check_support_names_the_sample() -> None:
    with pytest.raises(ValueError, match="^sample_a: expected a CUDA tensor, got one on cpu$"):
        class_op(with_dbias=True).check_support()


def test_class_refuses_dbias_it_was_not_built_for() -> None:
    t = seed_tensors()
    execute_args = {**_common_arguments(t), "d_row_tensor": t["d_row"], "b_tensor": t["b"]}
    with pytest.raises(ValueError, match="^dbias_tensor: this op was built without sample_dbias"):
        class_op(with_dbias=False).execute(**execute_args, dbias_tensor=t["dbias"])
    with pytest.raises(
        ValueError, match="^dbias_tensor: required, because the op was built with sample_dbias"
    ):
        class_op(with_dbias=True).execute(**execute_args)


def test_class_refuses_block_scaled_samples() -> None:
    t = seed_tensors()
    op = GroupedGemmDgluSm90(**samples(t), sample_sfa=torch.zeros(1), sample_b=t["b"])
    with pytest.raises(NotImplementedError, match="^sample_sfa: got a Tensor; block-scaled"):
        op.check_support()


def discrete_arguments(**changes) -> dict[str, object]:
    """The wrapper's arguments with discrete weights: L int64 pointers, n and b_dtype."""
    arguments = wrapper_arguments(
        b_tensor=None, b_ptrs=torch.zeros(L, dtype=torch.int64), n=N, b_dtype=torch.bfloat16
    )
    arguments.update(changes)
    return arguments


@pytest.mark.parametrize("b_major", ["k", "n"])
def test_discrete_weights_reach_the_device_check(b_major: str) -> None:
    with pytest.raises(ValueError, match=f"^{NOT_ON_GPU}$"):
        grouped_gemm_dglu_wrapper_sm90(**discrete_arguments(b_major=b_major, generate_dbias=True))


# changes to the discrete wrapper call -> the start of its error
BAD_DISCRETE = {
    "b_ptrs int32": (
        {"b_ptrs": torch.zeros(L, dtype=torch.int32)},
        "b_ptrs: dtype torch.int32 is not accepted; expected one of torch.int64",
    ),
    "b_ptrs not contiguous": (
        {"b_ptrs": torch.zeros(2 * L, dtype=torch.int64)[::2]},
        "b_ptrs: strides (2,) differ from the required (1,)",
    ),
    "b_ptrs of rank 2": (
        {"b_ptrs": torch.zeros(L, 1, dtype=torch.int64)},
        "b_ptrs: expected shape (L,), got rank 2",
    ),
    "b_ptrs a list": ({"b_ptrs": [0] * L}, "b_ptrs: expected a torch.Tensor, got list"),
    "b_ptrs longer than alpha": (
        {"b_ptrs": torch.zeros(L + 1, dtype=torch.int64)},
        f"padded_offsets: shape ({L},) does not match (L,) = ({L + 1},) with N={N}, M={M}, "
        f"K={K}, L={L + 1} (N from n; M, K from a_tensor; L from b_ptrs)",
    ),
    "too many experts": (
        {"b_ptrs": torch.zeros(1025, dtype=torch.int64)},
        "b_ptrs: L = 1025 must be at most 1024 (the kernels search at most 1024 experts)",
    ),
    "n not a multiple of 32": ({"n": 80}, "n: N = 80 must be a multiple of 32 (gate/input"),
    "n not an int": ({"n": 96.0}, "n: expected a positive int, got 96.0"),
    "n missing": ({"n": None}, "n: required with b_ptrs, b_dtype (discrete weights take"),
    "b_dtype missing": ({"b_dtype": None}, "b_dtype: required with b_ptrs, n"),
    "b_dtype int64": ({"b_dtype": torch.int64}, "b_dtype: expected the torch dtype of the"),
    "b_dtype fp16": (
        {"b_dtype": torch.float16},
        "b_dtype: fp16 differs from a_tensor's dtype bf16; A and B must have the same dtype",
    ),
    "c of another N": (
        {"n": N + 32},
        f"c_tensor: shape ({M}, {2 * N}, 1) does not match (M, 2N, 1) = ({M}, {2 * N + 64}, 1)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DISCRETE))
def test_bad_discrete_weights_are_named(case: str) -> None:
    changes, message = BAD_DISCRETE[case]
    with pytest.raises((ValueError, TypeError)) as raised:
        grouped_gemm_dglu_wrapper_sm90(**discrete_arguments(**changes))
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize(
    ("b_major", "strides"), [("k", (K, 1, N * K)), ("n", (1, N, N * K))], ids=["k", "n"]
)
def test_discrete_views_b_ptrs_and_one_experts_matrix(
    b_major, strides, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b_ptrs (L,) int64 and the b_expert template: (N, K, 1) in b_major order at b_ptrs'
    address rounded down to 16 bytes (an 8-byte aligned slice here)."""
    monkeypatch.setattr(validation, "_check_devices", lambda args: None)
    tensors = seed_tensors()
    del tensors["b"]
    b_ptrs = torch.zeros(L + 1, dtype=torch.int64)[1:]
    tensors["b_ptrs"] = b_ptrs
    problem = describe(
        tensors, wrapper_discrete(N, torch.bfloat16, bf16_policy()), weight_mode="discrete", b_major=b_major
    )
    assert {s: problem.scalars[s] for s in "mnkl"} == {"m": M, "n": N, "k": K, "l": L}
    assert (problem.scalars["n2"], problem.scalars["l_n2"]) == (2 * N, L * 2 * N)
    assert problem.tensors["b_ptrs"].pointer == b_ptrs.data_ptr()
    assert (problem.tensors["b_ptrs"].shape, problem.tensors["b_ptrs"].dtype) == ((L,), "i64")
    template = problem.tensors["b_expert"]
    assert template.pointer == b_ptrs.data_ptr() - b_ptrs.data_ptr() % 16
    assert template.pointer % 16 == 0 and b_ptrs.data_ptr() - template.pointer == 8
    assert (template.shape, template.strides, template.dtype) == ((N, K, 1), strides, "bf16")
    assert "b" not in problem.tensors


def class_discrete_op(**changes) -> GroupedGemmDgluSm90:
    t = seed_tensors()
    arguments = {**samples(t), "num_experts": L, "b_shape": (N, K), "b_dtype": torch.bfloat16}
    return GroupedGemmDgluSm90(**{**arguments, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, "sample_a: expected a CUDA tensor, got one on cpu"),
        ({"b_major": "n", "use_dynamic_sched": True}, "sample_a: expected a CUDA tensor"),
        (
            {"num_experts": L - 1},
            f"sample_padded_offsets: shape ({L},) does not match (L,) = ({L - 1},) with "
            f"N={N}, K={K}, L={L - 1}, M={M} (N, K from b_shape; L from num_experts; M from "
            "sample_a)",
        ),
        (
            {"b_shape": (N, K + 8)},
            f"sample_a: shape ({M}, {K}, 1) does not match (M, K, 1) = ({M}, {K + 8}, 1) with "
            f"N={N}, K={K + 8}, L={L}, M={M} (N, K from b_shape; L from num_experts; M from "
            "sample_a)",
        ),
        ({"b_shape": (80, K)}, "b_shape: N = 80 must be a multiple of 32"),
        ({"num_experts": 2000}, "num_experts: L = 2000 must be at most 1024"),
        ({"b_shape": None}, "b_shape: required with num_experts, b_dtype"),
        (
            {"sample_b": seed_tensors()["b"]},
            "sample_b and num_experts, b_shape, b_dtype: dense and discrete weights exclude",
        ),
        ({"num_experts": None, "b_shape": None, "b_dtype": None}, "sample_b: required"),
    ],
)
def test_class_discrete_weights_are_checked(changes, message) -> None:
    with pytest.raises(ValueError) as raised:
        class_discrete_op(**changes).check_support()
    assert str(raised.value).startswith(message), str(raised.value)


def test_class_discrete_sizes_reach_describe_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The class API's discrete op checks b_ptrs against num_experts at execute()."""
    tensors = seed_tensors()
    del tensors["b"]
    tensors["b_ptrs"] = torch.zeros(L - 1, dtype=torch.int64)
    with pytest.raises(ValueError, match=rf"^b_ptrs: shape \({L - 1},\) does not match"):
        describe(tensors, class_discrete(L, (N, K), torch.bfloat16, bf16_policy()), weight_mode="discrete")


def execute_arguments(**changes) -> dict[str, object]:
    t = seed_tensors()
    return {**_common_arguments(t), "d_row_tensor": t["d_row"], **changes}


@pytest.mark.parametrize(
    ("discrete_op", "weights", "message"),
    [
        (
            True,
            {"b_tensor": seed_tensors()["b"]},
            "b_tensor: this op was built for discrete weights (num_experts, b_shape and "
            "b_dtype); pass b_ptrs",
        ),
        (
            False,
            {"b_ptrs": torch.zeros(L, dtype=torch.int64)},
            "b_ptrs: this op was built for dense weights (sample_b); pass b_tensor",
        ),
        (
            True,
            {},
            "b_tensor: required (the stacked (N, K, L) expert weights), got None; for "
            "discrete weights pass b_ptrs instead",
        ),
    ],
)
def test_execute_takes_the_weights_of_the_mode_built(discrete_op, weights, message) -> None:
    op = class_discrete_op() if discrete_op else class_op(with_dbias=False)
    with pytest.raises(ValueError) as raised:
        op.execute(**execute_arguments(**weights))
    assert str(raised.value).startswith(message), str(raised.value)
