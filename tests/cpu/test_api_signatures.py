"""The public API's signatures, pinned: names, positional order, kinds and defaults.

Order: cuDNN FE 1.32.0's for the parameters both share, so that a caller passing arguments
positionally gets the same binding from dglu as from cuDNN FE; dglu's additions follow.
The 1.32.0 orders below are copied from ``nvidia-cudnn-frontend`` 1.32.0,
``cudnn/gemm/cutedsl/grouped/dglu/api.py`` (``grouped_gemm_dglu_wrapper_sm100``,
``GroupedGemmDgluSm100.__init__`` and ``.execute``); where that source is at hand (the
installed ``cudnn`` package, ``$DGLU_CUDNN_FE_SOURCE`` or the unpacked copy of the project's
brief) a test parses it with ``ast`` and checks the copy.

Defaults are the seed document's (/work/shared/seed/grouped_gemm_dglu_sm100.md, "Common
Parameters" and "Wrapper-specific Parameters"), except acc_dtype and d_dtype (None, meaning
torch.float32 and torch.bfloat16) and the tensors every call needs (None, refused by name:
Python puts no parameter without a default after the optional sfa_tensor).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from pathlib import Path

import pytest

import dglu
from dglu import arguments

P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY

CUDNN_FE_API = "cudnn/gemm/cutedsl/grouped/dglu/api.py"
CUDNN_FE_UNPACKED = Path("/work/brief/cudnn_fe_1.32.0")
# cuDNN FE 1.32.0's positional parameters (self left out), from CUDNN_FE_API.
CUDNN_FE_WRAPPER = (
    "a_tensor", "c_tensor", "sfa_tensor", "padded_offsets", "alpha_tensor", "beta_tensor",
    "prob_tensor", "dprob_tensor", "b_tensor", "sfb_tensor", "generate_dbias", "b_ptrs",
    "sfb_ptrs", "n", "b_dtype", "b_major", "norm_const_tensor", "acc_dtype", "d_dtype",
    "cd_major", "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "sf_fp8_dtype_override",
    "vector_f32", "m_aligned", "discrete_col_sfd", "act_func", "linear_offset", "geglu_alpha",
    "glu_clamp_max", "glu_clamp_min", "situ_beta1", "situ_beta2", "epilogue_op",
    "use_dynamic_sched", "use_single_group_runtime_offsets", "current_stream",
    "round_dgrad_to_input_dtype", "activation_tensor", "deterministic",
)  # fmt: skip
CUDNN_FE_CONSTRUCTOR = (
    "sample_a", "sample_c", "sample_d_row", "sample_d_col", "sample_sfa",
    "sample_padded_offsets", "sample_alpha", "sample_beta", "sample_prob", "sample_dprob",
    "sample_b", "sample_sfb", "sample_dbias", "num_experts", "b_shape", "b_dtype",
    "sample_sfd_row", "sample_sfd_col", "sample_amax", "sample_norm_const", "acc_dtype",
    "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "sf_fp8_dtype_override", "vector_f32",
    "m_aligned", "discrete_col_sfd", "act_func", "b_major", "epilogue_op", "use_dynamic_sched",
    "use_single_group_runtime_offsets", "linear_offset", "geglu_alpha", "glu_clamp_max",
    "glu_clamp_min", "situ_beta1", "situ_beta2", "round_dgrad_to_input_dtype",
    "sample_activation", "_deterministic",
)  # fmt: skip
CUDNN_FE_EXECUTE = (
    "a_tensor", "c_tensor", "d_row_tensor", "d_col_tensor", "sfa_tensor", "padded_offsets",
    "alpha_tensor", "beta_tensor", "prob_tensor", "dprob_tensor", "b_tensor", "sfb_tensor",
    "dbias_tensor", "b_ptrs", "sfb_ptrs", "sfd_row_tensor", "sfd_col_tensor", "amax_tensor",
    "norm_const_tensor", "current_stream", "activation_tensor",
)  # fmt: skip
CUDNN_FE_EXECUTE_KEYWORD_ONLY = ("workspace",)
# dglu's names for cuDNN FE's: the seed's public name for a private one.
RENAMED = {"_deterministic": "deterministic"}
# Defaults that differ from cuDNN FE 1.32.0's, and why (the report lists them).
DEFAULT_DIFFERENCES = {
    "mma_tiler_mn": "None (the largest installed tile; Hopper's largest is 128x128, not 256x256)",
    "linear_offset": "1.0 (the seed's default; cuDNN FE's None means the same 1.0 for dgeglu)",
}

SEED_DEFAULTS = {
    "mma_tiler_mn": None, "cluster_shape_mn": None, "sf_vec_size": 16, "vector_f32": False,
    "m_aligned": 256, "discrete_col_sfd": False, "act_func": "dswiglu", "geglu_alpha": 1.702,
    "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0, "situ_beta1": 4.0,
    "situ_beta2": 25.0, "b_major": "k", "cd_major": "n", "epilogue_op": None,
    "generate_dbias": False, "use_dynamic_sched": False, "deterministic": False,
    "act_out": False, "use_single_group_runtime_offsets": False, "acc_dtype": None,
    "d_dtype": None, "round_dgrad_to_input_dtype": False, "sf_fp8_dtype_override": None,
}  # fmt: skip

FRONTENDS = [
    (dglu.grouped_gemm_dglu_wrapper_sm90, arguments.WRAPPER, (), CUDNN_FE_WRAPPER),
    (dglu.grouped_gemm_dglu_wrapper_sm100, arguments.WRAPPER, (), CUDNN_FE_WRAPPER),
    (dglu.GroupedGemmDgluSm100.__init__, arguments.CONSTRUCTOR, (), CUDNN_FE_CONSTRUCTOR),
    (dglu.GroupedGemmDgluSm100.execute, arguments.EXECUTE, arguments.EXECUTE_KEYWORD_ONLY, CUDNN_FE_EXECUTE),
]
IDS = ["wrapper_sm90", "wrapper_sm100", "class_init", "execute"]


def _parameters(function) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(function).parameters.values() if p.name != "self"]


@pytest.mark.parametrize(("function", "order", "keyword_only", "cudnn_fe"), FRONTENDS, ids=IDS)
def test_signature_is_the_argument_table(function, order, keyword_only, cudnn_fe) -> None:
    """Names, kinds and defaults are dglu.arguments' rows, in its order."""
    expected = [(name, P, arguments.ARGUMENTS[name].default) for name in order]
    expected += [(name, K, arguments.ARGUMENTS[name].default) for name in keyword_only]
    assert [(p.name, p.kind, p.default) for p in _parameters(function)] == expected


@pytest.mark.parametrize(("function", "order", "keyword_only", "cudnn_fe"), FRONTENDS, ids=IDS)
def test_positional_order_is_cudnn_fe_1_32(function, order, keyword_only, cudnn_fe) -> None:
    """cuDNN FE's positional parameters come first, in its order; dglu's additions after."""
    names = [p.name for p in _parameters(function) if p.kind is P]
    assert names[: len(cudnn_fe)] == [RENAMED.get(name, name) for name in cudnn_fe]
    assert [p.name for p in _parameters(function) if p.kind is K] == list(keyword_only)


@pytest.mark.parametrize(("function", "order", "keyword_only", "cudnn_fe"), FRONTENDS, ids=IDS)
def test_defaults_are_the_seed(function, order, keyword_only, cudnn_fe) -> None:
    for parameter in _parameters(function):
        if parameter.name in SEED_DEFAULTS:
            assert parameter.default == SEED_DEFAULTS[parameter.name], parameter.name
        else:  # a tensor, a sample, the weights' arguments or the stream
            assert parameter.default is None, parameter.name


def test_every_table_row_is_offered_by_a_frontend() -> None:
    offered = {*arguments.WRAPPER, *arguments.CONSTRUCTOR, *arguments.EXECUTE, *arguments.EXECUTE_KEYWORD_ONLY}
    assert set(arguments.ARGUMENTS) == offered
    for arg in arguments.ARGUMENTS.values():
        assert arg.role in arguments.ROLES
        # what a family accepts is its front policy's (manifest data); only what no frontend
        # takes is refused here
        assert (arg.refusal is not None) == (arg.name == "workspace"), arg.name


def _cudnn_fe_source() -> Path | None:
    """cuDNN FE 1.32.0's dglu api.py, where it is at hand (see the module docstring)."""
    candidates = []
    if os.environ.get("DGLU_CUDNN_FE_SOURCE"):
        candidates.append(Path(os.environ["DGLU_CUDNN_FE_SOURCE"]) / CUDNN_FE_API)
    spec = importlib.util.find_spec("cudnn")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p).parent / CUDNN_FE_API for p in spec.submodule_search_locations]
    candidates.append(CUDNN_FE_UNPACKED / CUDNN_FE_API)
    return next((path for path in candidates if path.is_file()), None)


def _parsed_orders(source: Path) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """(positional, keyword-only) parameter names of the functions the copies are of."""
    tree = ast.parse(source.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "grouped_gemm_dglu_wrapper_sm100":
            found["wrapper"] = node
        if isinstance(node, ast.ClassDef) and node.name == "GroupedGemmDgluSm100":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "execute"):
                    found[item.name] = item
    return {
        name: (
            tuple(a.arg for a in node.args.args if a.arg != "self"),
            tuple(a.arg for a in node.args.kwonlyargs),
        )
        for name, node in found.items()
    }


def test_the_pinned_orders_are_cudnn_fe_1_32s() -> None:
    source = _cudnn_fe_source()
    if source is None:
        pytest.skip("cuDNN FE 1.32.0's source is not at hand (install nvidia-cudnn-frontend==1.32.0)")
    orders = _parsed_orders(source)
    assert orders["wrapper"] == (CUDNN_FE_WRAPPER, ())
    assert orders["__init__"] == (CUDNN_FE_CONSTRUCTOR, ())
    assert orders["execute"] == (CUDNN_FE_EXECUTE, CUDNN_FE_EXECUTE_KEYWORD_ONLY)


def _offered(function) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in _parameters(function)]


@pytest.mark.parametrize("frontend", ["torch_op", "jax"])
def test_torch_and_jax_offer_the_wrapper_but_what_they_say_why_not(frontend) -> None:
    """dglu.torch.grouped_gemm_dglu (and its op's schema) and dglu.jax take the wrapper's
    parameters in its order, less those arguments.NOT_OFFERED names with the reason."""
    if frontend == "torch_op":
        pytest.importorskip("torch")
        from dglu.torch.op import grouped_gemm_dglu as function
    else:
        pytest.importorskip("jax")
        from dglu.jax import grouped_gemm_dglu_jax as function
    not_offered = arguments.NOT_OFFERED[frontend]
    expected = [(name, arguments.ARGUMENTS[name].default) for name in arguments.WRAPPER if name not in not_offered]
    assert _offered(function) == expected
    assert all(why for why in not_offered.values()) and set(not_offered) <= set(arguments.WRAPPER)


def test_the_torch_ops_schema_is_its_functions_parameters() -> None:
    torch = pytest.importorskip("torch")
    from dglu.torch.op import _PARAMETERS

    schema = torch.ops.dglu.grouped_gemm_dglu.default._schema
    assert tuple(argument.name for argument in schema.arguments) == _PARAMETERS


def test_execute_hands_its_tensors_to_the_bound_op_in_the_tables_order() -> None:
    """execute() builds its tensors' tuple by hand (no locals() per call): in the order of
    dglu.bound.EXECUTE_TENSORS, which the bound op's getters index."""
    import ast
    import inspect
    import textwrap

    from dglu import bound, op

    tree = ast.parse(textwrap.dedent(inspect.getsource(op.GroupedGemmDglu.execute)))
    (built,) = [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["tensors"]
    ]
    assert [element.id for element in built.elts] == list(bound.EXECUTE_TENSORS)


def test_the_wrapper_builds_its_tuples_in_the_tables_order() -> None:
    """The wrapper builds its settings' and tensors' tuples by hand: in the orders of
    dglu.api._SETTINGS and dglu.bound.WRAPPER_TENSORS (the table's wrapper order)."""
    import ast
    import inspect

    from dglu import api, bound

    tree = ast.parse(inspect.getsource(api.grouped_gemm_dglu))
    built = {
        node.targets[0].id: [element.id for element in node.value.elts]
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Tuple)
    }
    assert built["settings"] == list(api._SETTINGS)
    assert built["tensors"] == list(bound.WRAPPER_TENSORS)
