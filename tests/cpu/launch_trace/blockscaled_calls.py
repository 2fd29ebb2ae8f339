"""The sm100_blockscaled side of trace_calls.py: the seed's tensors of a block-scaled call
(CPU, never read by the stand-in driver) and cuDNN FE's block-scaled kernel compiled by the
DSL with its own host launcher, called as its API calls it (``GroupedGemmDgluBlockScaledAPI``'s
execute): the symbolic configuration dglu ships, or (``static``) cuDNN FE's static-N/K/L one
(CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0; discrete: its own), whose host code encodes the TMA
descriptors from static strides.

NVFP4: dglu takes A and B as the seed's float4_e2m1fn_x2 tensors (K/2 bytes a row), but the
DSL's dlpack import of such a tensor is wrong (CuTe DSL 4.8.1 reads (64, 32, 1) as (64, 64,
2)), so its host code is given the logical view cuDNN FE's compile declares instead: a uint8
tensor of K elements a row at the same address, typed Float4E2M1FN (``logical_fp4``). Each
operand's storage holds a byte per value so that view stays in bounds; the stand-in reads
no memory, only addresses, extents and strides."""

from __future__ import annotations

import torch

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
         "e5m2": torch.float8_e5m2, "e8m0": torch.float8_e8m0fnu}


def _fp4(rows: int, k: int, groups: int) -> torch.Tensor:
    """An FP4 operand (rows, K/2, groups) as the seed gives it (K contiguous), over storage
    of rows * K * groups bytes (room for ``logical_fp4``'s view)."""
    storage = torch.zeros(groups * rows * k, dtype=torch.uint8)
    return storage.as_strided((rows, k // 2, groups), (k // 2, 1, rows * k // 2)).view(torch.float4_e2m1fn_x2)


def logical_fp4(operand: torch.Tensor):
    """The DSL's view of an FP4 operand: K values a row (strides doubled but the unit one),
    one uint8 each at the operand's address, typed Float4E2M1FN, its layout dynamic as the
    DSL's own import of a torch tensor marks it (cute.runtime.TensorAdapter)."""
    import cutlass
    from cutlass.cute.runtime import from_dlpack

    shape = tuple(2 * e if s == 1 else e for e, s in zip(operand.shape, operand.stride()))
    strides = tuple(s if s == 1 else 2 * s for s in operand.stride())
    view = from_dlpack(torch.as_strided(operand.view(torch.uint8), shape, strides), assumed_align=16)
    view.element_type = cutlass.Float4E2M1FN
    return view.mark_layout_dynamic()


def _byte(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 else torch.zeros(shape, dtype=dtype)


def _scale_factors(config, rows: int, cols: int, groups: int = 1) -> torch.Tensor:
    vec = config.recipe.sf_vec_size
    rest = -(-(-(-cols // vec)) // 4)
    return _byte((groups, -(-rows // 128), rest, 32, 4, 4), TORCH[config.recipe.sf_dtype]).permute(3, 4, 1, 5, 2, 0)


def tensors(config, m: int, n: int, k: int) -> dict[str, torch.Tensor]:
    """The seed's tensors of the call, by the manifest's argument names."""
    experts = config.experts
    made = {
        "a": _fp4(m, k, 1) if config.fp4 else _byte((m, k, 1), TORCH[config.ab_dtype]),
        "sfa": _scale_factors(config, m, k),
        "c": _byte((m, 2 * n, 1), TORCH[config.c_dtype]),
        "d_row": _byte((m, 2 * n, 1), TORCH[config.d_dtype]),
        "padded_offsets": torch.zeros((experts,), dtype=torch.int32),
        "alpha": torch.zeros((experts,), dtype=torch.float32),
        "beta": torch.zeros((experts,), dtype=torch.float32),
        "prob": torch.zeros((m, 1, 1), dtype=torch.float32),
        "dprob": torch.zeros((m, 1, 1), dtype=torch.float32),
    }
    if config.generate_sfd:
        made.update(d_col=_byte((m, 2 * n, 1), TORCH[config.d_dtype]), sfd_row=_scale_factors(config, m, 2 * n),
                    sfd_col=_scale_factors(config, 2 * n, m), norm_const=torch.zeros((1,), dtype=torch.float32))
    if config.amax:
        made["amax"] = torch.zeros((experts, 2, 1), dtype=torch.float32)
    if config.dbias:
        made["dbias"] = torch.zeros((experts, 2 * n, 1), dtype=torch.bfloat16)
    if config.discrete_weights:
        made["b_ptrs"] = torch.zeros((experts,), dtype=torch.int64)
        made["sfb_ptrs"] = torch.zeros((experts,), dtype=torch.int64)
    elif config.b_n_major:
        made["b"] = _byte((experts, k, n), TORCH[config.ab_dtype]).permute(2, 1, 0)  # (N, K, L), N contiguous
        made["sfb"] = _scale_factors(config, n, k, experts)
    else:
        made["b"] = _fp4(n, k, experts) if config.fp4 else _byte((experts, n, k), TORCH[config.ab_dtype]).permute(1, 2, 0)
        made["sfb"] = _scale_factors(config, n, k, experts)
    return made


def dsl_host(config, made: dict[str, torch.Tensor], n: int, k: int, workspace: int, clusters: int, prefix: str,
             static: bool, stream: int) -> None:
    """cuDNN FE's kernel, compiled by the DSL with its own host launcher, and called."""
    import cutlass
    import cutlass.cute as cute
    import cuda.bindings.driver as cuda_driver
    from cutlass.cute.runtime import make_ptr
    from dglu_build.kernels.sm100_blockscaled import compile as blockscaled

    kernel = blockscaled.kernel_object(config)
    blockscaled.name_kernels(kernel, prefix)
    arguments = blockscaled.fake_arguments(config, "static" if static else "symbolic", n=n, k=k)
    arguments["max_active_clusters"] = clusters
    compiled = cute.compile(kernel, **arguments, options=f"--gpu-arch {config.arch}")
    compiled.__dict__["num_devices"] = 1  # its only cudart query, answered here
    gmem = cute.AddressSpace.gmem
    if config.discrete_weights:
        b = make_ptr(cutlass.Int64, made["b_ptrs"].data_ptr(), gmem, assumed_align=8)
        sfb = make_ptr(cutlass.Int64, made["sfb_ptrs"].data_ptr(), gmem, assumed_align=8)
        n_value, k_value = cutlass.Int32(n), cutlass.Int32(k)
        b_stride = cutlass.Int64(n if config.b_n_major else k)
    else:  # dense: FP4 B as the DSL's logical view, N-major B as cuDNN FE takes it (its canonical (L, K, N) form)
        b = logical_fp4(made["b"]) if config.fp4 else made["b"].permute(2, 1, 0) if config.b_n_major else made["b"]
        sfb = made["sfb"]
        n_value, k_value, b_stride = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int64(0)
    a = logical_fp4(made["a"]) if config.fp4 else made["a"]
    # D_col is an argument of the host function even where the kernel takes none (NVFP4's
    # 16-bit D): cuDNN FE's API passes the one its wrapper always allocates
    d_col = made["d_col"] if "d_col" in made else torch.zeros_like(made["d_row"])
    compiled(
        a, b, sfb, n_value, k_value, b_stride, make_ptr(cutlass.Uint8, workspace, gmem, assumed_align=128),
        made["c"], made["d_row"], d_col, made["sfa"], made.get("sfd_row"), made.get("sfd_col"),
        made.get("amax"), made.get("norm_const"), made["padded_offsets"], made["alpha"], made["beta"], made["prob"],
        made["dprob"], made.get("dbias"), cuda_driver.CUstream(stream),
    )
