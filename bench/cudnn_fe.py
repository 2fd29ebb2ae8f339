"""cuDNN FE's own compile of its BF16 dGLU kernel, run on a machine without a GPU.

``GroupedGemmDgluBf16API(...).check_support(); .compile()`` on CPU torch tensors, with the
three device queries it makes stubbed (CUDA available, the compute capability of the
variant's architecture, and the DSL's HardwareInfo, answering a B200's active clusters),
and ``--gpu-arch``/``--keep-cubin`` added to its cute.compile options so the cubin is kept.
What a cuDNN FE user pays per (N, K, L, configuration) at run time (bench.jit_compile_time),
and the reference of the cubin-parity tests (tests/cpu/test_sm100_parity.py). Needs torch
and the build extra (nvidia-cudnn-frontend, CuTe DSL).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

B200_SMS = 148
CAPABILITY = {"sm_100a": (10, 0), "sm_103a": (10, 3)}


class CudnnCompile(NamedTuple):
    """cuDNN FE's compile: its cubin and the seconds compile() took."""

    cubin: bytes
    seconds: float


class _B200:
    """cutlass.utils.HardwareInfo without a device: a B200's active clusters."""

    def get_max_active_clusters(self, cluster_size: int, stream: Any = None) -> int:
        return B200_SMS // cluster_size


@contextlib.contextmanager
def stubbed_device(arch: str, captured: dict[str, Any]) -> Iterator[None]:
    """cuDNN FE's device queries answered for ``arch``; its cute.compile keeps the cubin
    (in a temporary directory) and leaves the compiled function in ``captured["compiled"]``.
    Restored on exit."""
    import tempfile

    import cutlass
    import cudnn.gemm.cutedsl.grouped.dglu._bf16_api as bf16_api

    saved = (bf16_api.cuda_is_available, bf16_api.get_compute_capability, cutlass.utils.HardwareInfo, bf16_api.cute.compile)
    real_compile = bf16_api.cute.compile

    def compile_keeping_the_cubin(*args: Any, **kwargs: Any) -> Any:
        with tempfile.TemporaryDirectory(prefix="dglu-cudnn-") as dump:
            kwargs["options"] = f"{kwargs.get('options') or ''} --gpu-arch {arch} --keep-cubin --dump-dir={dump}"
            captured["compiled"] = real_compile(*args, **kwargs)
        return captured["compiled"]

    bf16_api.cuda_is_available = lambda: True
    bf16_api.get_compute_capability = lambda *args, **kwargs: CAPABILITY[arch]
    cutlass.utils.HardwareInfo = _B200
    bf16_api.cute.compile = compile_keeping_the_cubin
    try:
        yield
    finally:
        (bf16_api.cuda_is_available, bf16_api.get_compute_capability, cutlass.utils.HardwareInfo,
         bf16_api.cute.compile) = saved


def sample_tensors(config: Any, m: int, n: int, k: int) -> dict[str, Any]:
    """The API's sample arguments for a static (M, N, K, L) problem, as CPU tensors."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    experts = config.experts
    samples: dict[str, Any] = {
        "sample_a": torch.empty((m, k, 1), dtype=torch.bfloat16),
        "sample_c": torch.empty((m, 2 * n, 1), dtype=dtypes[config.c_dtype]),
        "sample_d_row": torch.empty((m, 2 * n, 1), dtype=dtypes[config.d_dtype]),
        "sample_padded_offsets": torch.empty((experts,), dtype=torch.int32),
        "sample_alpha": torch.empty((experts,), dtype=torch.float32),
        "sample_beta": torch.empty((experts,), dtype=torch.float32),
        "sample_prob": torch.empty((m, 1, 1), dtype=torch.float32),
        "sample_dprob": torch.empty((m, 1, 1), dtype=torch.float32),
    }
    if config.dbias:
        samples["sample_dbias"] = torch.empty((experts, 2 * n, 1), dtype=torch.bfloat16)
    if config.discrete_weights:
        samples.update(num_experts=experts, b_shape=(n, k), b_dtype=torch.bfloat16)
    elif config.b_n_major:  # cuDNN FE takes N-major dense B in its canonical (L, K, N) form
        samples["sample_b"] = torch.empty((experts, k, n), dtype=torch.bfloat16)
    else:
        samples["sample_b"] = torch.empty((experts, n, k), dtype=torch.bfloat16).permute(1, 2, 0)
    return samples


def _compiled(api: Any, config: Any, stub: Any, symbol_prefix: str | None) -> CudnnCompile:
    """cuDNN FE's own check_support() and compile() of ``api`` under the device stand-in
    ``stub`` (its kernels renamed to ``symbol_prefix``_main/_helper when given): the cubin
    its cute.compile produced, and the compile's seconds."""
    captured: dict[str, Any] = {}
    with stub(config.arch, captured):
        if not api.check_support():
            raise ValueError(f"cuDNN FE does not support {config}")
        if symbol_prefix is not None:
            kernel = api._kernel_instance()
            kernel.kernel.set_name_prefix(f"{symbol_prefix}_main", remove_cutlass_symbol=True, keep_mangled_name=False)
            kernel.helper_kernel.set_name_prefix(f"{symbol_prefix}_helper", remove_cutlass_symbol=True, keep_mangled_name=False)
        start = time.perf_counter()
        api.compile()
        seconds = time.perf_counter() - start
    cubin = captured["compiled"].__cubin__
    if not isinstance(cubin, bytes) or not cubin:
        raise RuntimeError("cuDNN FE's compile kept no cubin")
    return CudnnCompile(cubin, seconds)


def cudnn_fe_compile(config: Any, n: int, k: int, m: int = 4096, symbol_prefix: str | None = None) -> CudnnCompile:
    """cuDNN FE's compile of ``config`` (a dglu_build.kernels.sm100_bf16 Config) for N, K
    and the config's L; ``symbol_prefix`` names its kernels as dglu names its own."""
    import cudnn.gemm.cutedsl.grouped.dglu._bf16_api as bf16_api

    constants: Mapping[str, float] = {name: v for name, v in config.act_params.items() if name != "linear_offset"}
    api = bf16_api.GroupedGemmDgluBf16API(
        **sample_tensors(config, m, n, k), mma_tiler_mn=(config.tile_m, config.tile_n),
        cluster_shape_mn=(config.cluster_m, config.cluster_n), act_func=config.act_func,
        b_major="n" if config.b_n_major else "k", use_dynamic_sched=config.dynamic_schedule, **constants,
    )
    return _compiled(api, config, stubbed_device, symbol_prefix)


@contextlib.contextmanager
def stubbed_blockscaled_device(arch: str, captured: dict[str, Any]) -> Iterator[None]:
    """The block-scaled API's device queries (cudnn.api_base's, for the Rubin test, and
    torch.cuda's, for the SM100+ check) answered for ``arch``; its cute.compile keeps the
    cubin, as ``stubbed_device``. Restored on exit."""
    import tempfile

    import torch
    import cutlass
    import cutlass.cute as cute
    import cudnn.api_base as api_base

    saved_api = (api_base.cuda_is_available, api_base.get_compute_capability)
    saved_torch = (torch.cuda.is_available, torch.cuda.current_device, torch.cuda.get_device_capability)
    saved_dsl = (cutlass.utils.HardwareInfo, cute.compile)
    real_compile = cute.compile

    def compile_keeping_the_cubin(*args: Any, **kwargs: Any) -> Any:
        with tempfile.TemporaryDirectory(prefix="dglu-cudnn-") as dump:
            kwargs["options"] = f"{kwargs.get('options') or ''} --gpu-arch {arch} --keep-cubin --dump-dir={dump}"
            captured["compiled"] = real_compile(*args, **kwargs)
        return captured["compiled"]

    api_base.cuda_is_available = lambda: True
    api_base.get_compute_capability = lambda *args, **kwargs: CAPABILITY[arch]
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *args, **kwargs: CAPABILITY[arch]
    cutlass.utils.HardwareInfo = _B200
    cute.compile = compile_keeping_the_cubin
    try:
        yield
    finally:
        api_base.cuda_is_available, api_base.get_compute_capability = saved_api
        torch.cuda.is_available, torch.cuda.current_device, torch.cuda.get_device_capability = saved_torch
        cutlass.utils.HardwareInfo, cute.compile = saved_dsl


def _storage(shape: tuple[int, ...], dtype: Any) -> Any:
    """An empty CPU tensor of ``dtype`` (byte dtypes made as uint8 and viewed: torch cannot
    fill FP4 or E8M0)."""
    import torch

    return torch.empty(shape, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 else torch.empty(shape, dtype=dtype)


def _scale_factors(rows: int, cols: int, groups: int, vec: int, dtype: Any) -> Any:
    """Scale factors in the seed's permuted layout: a dense (groups, rows/128, rest, 32, 4, 4)
    buffer viewed as (32, 4, rows/128, 4, rest, groups)."""
    rest = -(-(-(-cols // vec)) // 4)
    return _storage((groups, -(-rows // 128), rest, 32, 4, 4), dtype).permute(3, 4, 1, 5, 2, 0)


def blockscaled_samples(config: Any, m: int, n: int, k: int) -> dict[str, Any]:
    """The block-scaled API's sample arguments for a (M, N, K, L) problem, as CPU tensors,
    in the seed's layouts (FP4 two values a byte); amax with a 16-bit D, as cuDNN FE's wrapper."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
              "e5m2": torch.float8_e5m2, "e2m1x2": torch.float4_e2m1fn_x2, "e8m0": torch.float8_e8m0fnu}
    experts, vec, sf = config.experts, config.recipe.sf_vec_size, dtypes[config.recipe.sf_dtype]
    ab = dtypes[config.ab_dtype]
    k_storage = k // 2 if config.fp4 else k

    def rows(count: int, cols: int, dtype: Any) -> Any:  # (rows, cols, 1), strides (cols, 1, rows*cols)
        return _storage((1, count, cols), dtype).permute(1, 2, 0)

    samples: dict[str, Any] = {
        "sample_a": rows(m, k_storage, ab), "sample_c": rows(m, 2 * n, dtypes[config.c_dtype]),
        "sample_d_row": rows(m, 2 * n, dtypes[config.d_dtype]), "sample_d_col": rows(m, 2 * n, dtypes[config.d_dtype]),
        "sample_sfa": _scale_factors(m, k, 1, vec, sf),
        "sample_padded_offsets": torch.empty((experts,), dtype=torch.int32),
        "sample_alpha": torch.empty((experts,), dtype=torch.float32),
        "sample_beta": torch.empty((experts,), dtype=torch.float32),
        "sample_prob": torch.empty((1, 1, m), dtype=torch.float32).permute(2, 1, 0),
        "sample_dprob": torch.empty((1, 1, m), dtype=torch.float32).permute(2, 1, 0),
    }
    if config.generate_sfd:
        samples.update(sample_sfd_row=_scale_factors(m, 2 * n, 1, vec, sf), sample_sfd_col=_scale_factors(2 * n, m, 1, vec, sf),
                       sample_norm_const=torch.empty((1,), dtype=torch.float32))
    if config.amax:
        samples["sample_amax"] = torch.empty((experts, 2, 1), dtype=torch.float32)
    if config.dbias:
        samples["sample_dbias"] = torch.empty((experts, 2 * n, 1), dtype=torch.bfloat16)
    if config.discrete_weights:
        samples.update(num_experts=experts, b_shape=(n, k), b_dtype=ab)
    elif config.b_n_major:  # cuDNN FE takes N-major dense B in its canonical (L, K, N) form
        samples["sample_b"] = _storage((experts, k_storage, n), ab)
        samples["sample_sfb"] = _scale_factors(n, k, experts, vec, sf)
    else:
        samples["sample_b"] = _storage((experts, n, k_storage), ab).permute(1, 2, 0)
        samples["sample_sfb"] = _scale_factors(n, k, experts, vec, sf)
    return samples


def cudnn_fe_blockscaled_compile(config: Any, n: int, k: int, m: int = 4096,
                                 symbol_prefix: str | None = None) -> CudnnCompile:
    """cuDNN FE's compile of ``config`` (a dglu_build.kernels.sm100_blockscaled Config) for
    N, K (the GEMM's, in values) and the config's L, on its default path (dense: M, N, K
    symbolic; discrete: N, K static); ``symbol_prefix`` names its kernels as dglu's."""
    import cudnn.gemm.cutedsl.grouped.dglu._blockscaled_api as bs_api

    api = bs_api.GroupedGemmDgluBlockScaledAPI(
        **blockscaled_samples(config, m, n, k), sf_vec_size=config.recipe.sf_vec_size,
        mma_tiler_mn=(config.tile_m, config.tile_n), cluster_shape_mn=(config.cluster_m, config.cluster_n),
        act_func=config.act_func, b_major="n" if config.b_n_major else "k", use_dynamic_sched=config.dynamic_schedule,
        discrete_col_sfd=config.discrete_col_sfd, use_single_group_runtime_offsets=config.single_group,
        **config.act_params,
    )
    return _compiled(api, config, stubbed_blockscaled_device, symbol_prefix)
