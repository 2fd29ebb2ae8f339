"""Reference (not project code): compile cuDNN FE 1.32.0's block-scaled dGLU kernel
(BlockScaledMoEGroupedGemmDgluDbiasKernel) ahead of time, with no GPU, from fake tensors built here
(no cuDNN FE API object). The fakes follow the three shapes cuDNN FE's own compile() uses, so the
cubin can be compared byte for byte with jit_blockscaled.py's:

  --shapes dynamic   dense B, cuDNN FE's default path: M, N, K symbolic, L symbolic in B/SFB shapes
  --shapes static    dense B, CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0: only M symbolic
  --discrete         per-expert B/SFB pointers: only M symbolic (as cuDNN FE compiles it)
The expert count L is a constructor constant in every case.
  --kernel discrete_dswiglu   BlockScaledDiscreteWeightDgluDbiasGroupedGemmKernel (implies --discrete)
  --kernel rubin              the Rubin BlockScaledMoEGroupedGemmDgluKernel (use --arch sm_107a)
"""
import argparse
import json
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--kernel", choices=["dglu", "discrete_dswiglu", "rubin"], default="dglu")
p.add_argument("--d", choices=["default", "fp8", "bf16"], default="default", help="D dtype (default: FP8 for MXFP8, BF16 for NVFP4)")
p.add_argument("--recipe", choices=["mxfp8", "nvfp4"], default="mxfp8")
p.add_argument("--act", default="dswiglu", choices=["dswiglu", "dgeglu", "dsituglu"])
p.add_argument("--dbias", action="store_true")
p.add_argument("--dbias-symbolic", action="store_true", help="dbias (L, 2N, 1) with 2N symbolic (cuDNN FE: static)")
p.add_argument("--amax", choices=["auto", "on", "off"], default="auto", help="auto: with SFD (as jit_blockscaled.py passes it)")
p.add_argument("--discrete", action="store_true")
p.add_argument("--discrete-symbolic", action="store_true", help="discrete with K and 2N symbolic too (cuDNN FE: static)")
p.add_argument("--shapes", choices=["dynamic", "static"], default="dynamic")
p.add_argument("--arch", default="sm_100a")
p.add_argument("--m-sample", type=int, default=4096, help="only enters unit-mode strides, as in cuDNN FE")
p.add_argument("--n", type=int, default=2048)
p.add_argument("--k", type=int, default=4096)
p.add_argument("--experts", type=int, default=8)
p.add_argument("--tile", default="256x256")
p.add_argument("--cluster", default="2x1")
p.add_argument("--dyn-sched", action="store_true")
p.add_argument("--max-active-clusters", type=int, default=74)
p.add_argument("--prefix", default="", help="stable kernel symbol prefix (changes the cubin's names)")
p.add_argument("--out", default="out/aot")
args = p.parse_args()

t0 = time.time()
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import OperandMajorMode
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor, make_ptr
from cudnn.gemm.cutedsl.grouped.dglu.moe_blockscaled_grouped_gemm_dglu_dbias import BlockScaledMoEGroupedGemmDgluDbiasKernel
from cudnn.gemm.cutedsl.grouped.moe_utils import MoEWeightMode
if args.kernel == "rubin":
    from cudnn.gemm.cutedsl.grouped.dglu.moe_blockscaled_grouped_gemm_dglu_rubin import BlockScaledMoEGroupedGemmDgluKernel as Kernel
elif args.kernel == "discrete_dswiglu":
    from cudnn.gemm.cutedsl.discrete_grouped.dswiglu.discrete_B_blockscaled_grouped_gemm_dglu_dbias import (
        BlockScaledDiscreteWeightDgluDbiasGroupedGemmKernel as Kernel)
    args.discrete = True
else:
    Kernel = BlockScaledMoEGroupedGemmDgluDbiasKernel
t_import = time.time() - t0

fp4 = args.recipe == "nvfp4"
AB = cutlass.Float4E2M1FN if fp4 else cutlass.Float8E4M3FN
SF = cutlass.Float8E4M3FN if fp4 else cutlass.Float8E8M0FNU
VEC = 16 if fp4 else 32
D = {"fp8": cutlass.Float8E4M3FN, "bf16": cutlass.BFloat16}.get(args.d, cutlass.BFloat16 if fp4 else cutlass.Float8E4M3FN)
C = cutlass.BFloat16
generate_sfd = not fp4 and D.width == 8  # the kernel's own rule: FP8 A/B, E8M0 SF, FP8 D
tm, tn = map(int, args.tile.split("x"))
cm, cn = map(int, args.cluster.split("x"))
L, N, K, Ms = args.experts, args.n, args.k, args.m_sample
N2 = 2 * N
f32, i32 = cutlass.Float32, cutlass.Int32
sym = cute.sym_int
cdiv = lambda x, y: -(-x // y)

ctor = dict(sf_vec_size=VEC, acc_dtype=f32, use_2cta_instrs=(tm == 256), mma_tiler_mn=(tm, tn),
            cluster_shape_mn=(cm, cn), vectorized_f32=False, discrete_col_sfd=False, expert_cnt=L,
            act_func=args.act, use_dynamic_sched=args.dyn_sched)
if args.kernel != "discrete_dswiglu":
    ctor["weight_mode"] = MoEWeightMode.DISCRETE if args.discrete else MoEWeightMode.DENSE
if args.kernel == "dglu":
    ctor["situ_beta1"] = 4.0
kernel = Kernel(**ctor)

valid_m = sym(divisibility=256)
m128 = sym()


def sf_fake(rows128, rest, stride_rows128, stride_rest, groups=1):
    """(32, 4, rows/128, 4, rest, groups) view of the permuted scale-factor buffer."""
    return make_fake_tensor(SF, (32, 4, rows128, 4, rest, groups), stride=(16, 4, stride_rows128, 1, 512, stride_rest), assumed_align=16)


def mx_compact(dtype, cols, div):
    """(valid_m, cols, 1) row-major; cols is a fresh symbol of the given divisibility when div."""
    return make_fake_compact_tensor(dtype, (valid_m, sym(divisibility=div) if div else cols, 1), stride_order=(1, 0, 2), assumed_align=16)


if args.discrete and args.discrete_symbolic:
    a = mx_compact(AB, None, 32 if fp4 else 16)
    c = mx_compact(C, None, 8)
    d, d_col = mx_compact(D, None, 8 if D.width == 16 else 16), mx_compact(D, None, 8 if D.width == 16 else 16)
    sfa = sf_fake(m128, sym(), sym(divisibility=512), sym(divisibility=512))
    b = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
    sfb = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
    n, k, b_stride = i32(N), i32(K), cutlass.Int64(K)  # run-time values
    prob_stride = (1, 1, 1)
elif args.discrete:
    align = 32 if fp4 else 16
    a = make_fake_tensor(AB, (valid_m, K, 1), stride=(K, 1, Ms * K), assumed_align=align)
    c = make_fake_tensor(C, (valid_m, N2, 1), stride=(N2, 1, Ms * N2), assumed_align=16)
    d, d_col = mx_compact(D, N2, 0), mx_compact(D, N2, 0)
    rest_k = cdiv(cdiv(K, VEC), 4)
    sfa = sf_fake(m128, rest_k, rest_k * 512, sym(divisibility=512))
    b = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
    sfb = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
    n, k, b_stride = i32(N), i32(K), cutlass.Int64(K)
    prob_stride = (1, Ms, Ms)
elif args.shapes == "static":
    a = mx_compact(AB, K, 0)
    b = make_fake_tensor(AB, (N, K, L), stride=(K, 1, N * K), assumed_align=16)
    c, d, d_col = mx_compact(C, N2, 0), mx_compact(D, N2, 0), mx_compact(D, N2, 0)
    rest_k = cdiv(cdiv(K, VEC), 4)
    sfa = sf_fake(m128, rest_k, rest_k * 512, sym(divisibility=512))
    n128 = cdiv(N, 128)
    sfb = sf_fake(n128, rest_k, rest_k * 512, n128 * rest_k * 512, groups=L)
    n, k, b_stride = i32(0), i32(0), cutlass.Int64(0)
    prob_stride = None
else:  # cuDNN FE's default: CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=1
    kdiv = 32 if fp4 else 16
    n_sym, k_sym, l_sym = sym(), sym(), sym()
    a = mx_compact(AB, None, kdiv)
    b = make_fake_compact_tensor(AB, (n_sym, sym(divisibility=kdiv), l_sym), stride_order=(1, 0, 2), assumed_align=16)
    c = mx_compact(C, None, 8)
    d, d_col = mx_compact(D, None, 8 if D.width == 16 else 16), mx_compact(D, None, 8 if D.width == 16 else 16)
    rest_k = sym()
    sfa = sf_fake(m128, rest_k, sym(divisibility=512), sym(divisibility=512))
    sfb = sf_fake(sym(), rest_k, sym(divisibility=512), sym(divisibility=512), groups=l_sym)
    n, k, b_stride = i32(0), i32(0), cutlass.Int64(0)
    prob_stride = (1, Ms, Ms)

if prob_stride is None:
    prob = make_fake_compact_tensor(f32, (valid_m, 1, 1), stride_order=(0, 1, 2), assumed_align=16)
    dprob = make_fake_compact_tensor(f32, (valid_m, 1, 1), stride_order=(0, 1, 2), assumed_align=16)
else:
    prob = make_fake_tensor(f32, (valid_m, 1, 1), stride=prob_stride, assumed_align=16)
    dprob = make_fake_tensor(f32, (valid_m, 1, 1), stride=prob_stride, assumed_align=16)

sfd_row = sfd_col = amax = norm_const = None
if generate_sfd:
    if (args.shapes == "dynamic" and not args.discrete) or args.discrete_symbolic:
        sfd_row = sf_fake(m128, sym(), sym(divisibility=512), sym(divisibility=512))
        sfd_col = sf_fake(sym(), sym(), sym(divisibility=512), sym(divisibility=512))
    else:
        rest_n2 = cdiv(cdiv(N2, VEC), 4)
        sfd_row = sf_fake(m128, rest_n2, rest_n2 * 512, sym(divisibility=512))
        sfd_col = sf_fake(cdiv(N2, 128), sym(divisibility=1), sym(divisibility=512), sym(divisibility=512))
    norm_const = make_fake_tensor(f32, (1,), stride=(1,), assumed_align=16)
if args.amax == "on" or (args.amax == "auto" and generate_sfd):
    amax = make_fake_tensor(f32, (L, 2, 1), stride=(2, 1, 1), assumed_align=16)
vec_l = lambda dt: make_fake_tensor(dt, (L,), stride=(1,), assumed_align=16)
dbias = None
if args.dbias:
    n2 = sym(divisibility=64) if args.dbias_symbolic else N2
    dbias = make_fake_tensor(cutlass.BFloat16, (L, n2, 1), stride=(n2, 1, 1), assumed_align=16)
ws = make_ptr(cutlass.Uint8, 128, cute.AddressSpace.gmem, assumed_align=128)

if args.prefix:
    kernel.kernel.set_name_prefix(args.prefix + "_main", remove_cutlass_symbol=True, keep_mangled_name=False)
    helper = kernel.desc_init_kernel_device_ptrs if args.kernel == "discrete_dswiglu" else kernel.helper_kernel
    helper.set_name_prefix(args.prefix + "_helper", remove_cutlass_symbol=True, keep_mangled_name=False)

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
t1 = time.time()
call = dict(a=a, b=b, sfb=sfb, n=n, k=k, b_stride_size=b_stride, b_major_mode=OperandMajorMode.K,
    workspace_ptr=ws, c=c, d=d, d_col=d_col, sfa=sfa, sfd_row_tensor=sfd_row, sfd_col_tensor=sfd_col,
    amax_tensor=amax, norm_const_tensor=norm_const, padded_offsets=vec_l(i32), alpha=vec_l(f32),
    beta=vec_l(f32), prob=prob, dprob=dprob, dbias_tensor=dbias, max_active_clusters=args.max_active_clusters,
    stream=make_fake_stream(use_tvm_ffi_env_stream=False), epilogue_op=lambda x: x,
    linear_offset=1.0 if args.act == "dgeglu" else 0.0, geglu_alpha=1.702, glu_clamp_max=7.0, glu_clamp_min=-7.0,
    situ_beta1=4.0, situ_beta2=25.0)
if args.kernel != "dglu":  # these two take linear_offset as a run-time Float32 and have no SiTU constants
    del call["situ_beta1"], call["situ_beta2"]
    call["linear_offset"] = f32(call["linear_offset"])
if args.kernel == "discrete_dswiglu":  # GeGLU constants are run-time Float32 there too
    for name in ("geglu_alpha", "glu_clamp_max", "glu_clamp_min"):
        call[name] = f32(call[name])
    call["b_ptrs"], call["sfb_ptrs"] = call.pop("b"), call.pop("sfb")
compiled = cute.compile(kernel, **call, options=f"--gpu-arch {args.arch} --keep-cubin --keep-ptx --dump-dir={out}")
t_compile = time.time() - t1
shape = ("discrete_symbolic" if args.discrete_symbolic else "discrete") if args.discrete else f"dense_{args.shapes}"
name = f"aot_{'' if args.kernel == 'dglu' else args.kernel + '_'}{args.recipe}_{args.act}_{shape}{('_dbiassym' if args.dbias_symbolic else '_dbias') if args.dbias else ''}{'_dynsched' if args.dyn_sched else ''}_{args.tile}_{args.cluster}_{args.arch}_L{L}{'_' + args.prefix if args.prefix else ''}"
(out / f"{name}.cubin").write_bytes(compiled.__cubin__)
ptx = compiled.__ptx__
(out / f"{name}.ptx").write_text(ptx if isinstance(ptx, str) else ptx.decode())
launch = {  # what the host side launches with, read off the kernel object after tracing
    "block": [kernel.threads_per_cta, 1, 1],
    "cluster": [cm, cn, 1],
    "dynamic_smem": int(kernel.shared_storage.size_in_bytes()),
    "grid": f"({cm}, {cn}, max_active_clusters)",
    "workspace_bytes": max(-(-kernel.get_workspace_bytes() // 128) * 128, 128),
    "helper_kernel": args.discrete or args.dyn_sched,
}
print(json.dumps({"name": name, "import_s": round(t_import, 2), "compile_s": round(t_compile, 2),
                  "cubin_bytes": len(compiled.__cubin__), **launch}))
