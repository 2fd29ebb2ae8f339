"""Reference (not project code): run cuDNN FE 1.32.0's own block-scaled dGLU compile()
(GroupedGemmDgluBlockScaledAPI) on a CPU-only machine with its device queries stubbed, and save
the cubin its cute.compile produced, for a byte comparison with compile_blockscaled.py.

  python jit_blockscaled.py --recipe mxfp8 --out out/jit         # default path (dynamic M/N/K/L)
  CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0 python jit_blockscaled.py  # static N/K/L path
"""
import argparse
import json
import os
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--api", choices=["dglu", "discrete_dswiglu"], default="dglu",
               help="discrete_dswiglu: DiscreteGroupedGemmDswigluSm100 (discrete_grouped/dswiglu/api.py)")
p.add_argument("--recipe", choices=["mxfp8", "nvfp4"], default="mxfp8")
p.add_argument("--act", default="dswiglu")
p.add_argument("--dbias", action="store_true")
p.add_argument("--discrete", action="store_true")
p.add_argument("--arch", default="sm_100a")
p.add_argument("--m", type=int, default=4096)
p.add_argument("--n", type=int, default=2048)
p.add_argument("--k", type=int, default=4096)
p.add_argument("--experts", type=int, default=8)
p.add_argument("--sms", type=int, default=148, help="SM count the stubbed HardwareInfo reports")
p.add_argument("--out", default="out/jit")
args = p.parse_args()

os.environ.setdefault("CUTE_DSL_ARCH", args.arch)
import torch
import cutlass
import cutlass.cute as cute
import cudnn.api_base as api_base
import cudnn.gemm.cutedsl.grouped.dglu._blockscaled_api as bs
import cudnn.gemm.cutedsl.discrete_grouped.dswiglu.api as dd
from cudnn.gemm.cutedsl.grouped.dglu._blockscaled_api import GroupedGemmDgluBlockScaledAPI

major, minor = int(args.arch[3:5]), int(args.arch[5])


class StubHardwareInfo:
    def get_max_active_clusters(self, cluster_size, stream=None):
        return args.sms // cluster_size


for module in (api_base, dd):
    module.cuda_is_available = lambda: True
    module.get_compute_capability = lambda *a, **k: (major, minor)
torch.cuda.is_available = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
cutlass.utils.HardwareInfo = StubHardwareInfo

captured = {}
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
_compile = cute.compile


def spy(*a, **kw):
    captured["options"] = kw.get("options")
    kw["options"] = (kw.get("options") or "") + f" --keep-cubin --dump-dir={out}"
    t0 = time.time()
    compiled = _compile(*a, **kw)
    captured["compile_s"] = time.time() - t0
    captured["compiled"] = compiled
    return compiled


cute.compile = spy


class GmemPlaceholder:
    """Stands in for from_dlpack(device buffer) in DiscreteGroupedGemmDswigluSm100.compile(), which
    only takes `.iterator` of its pointer placeholders (a CPU tensor would give a generic pointer)."""

    def __init__(self, tensor, assumed_align=16):
        self.assumed_align, self.element_type = assumed_align, cutlass.Uint8

    @property
    def iterator(self):
        return cute.runtime.make_ptr(self.element_type, 1 << 20, cute.AddressSpace.gmem, assumed_align=self.assumed_align)


cute.runtime.from_dlpack = GmemPlaceholder  # imported inside that compile()
bs.cute.compile = spy


class GmemPlaceholder:
    """Stands in for from_dlpack(device buffer) in DiscreteGroupedGemmDswigluSm100.compile(), which
    only takes `.iterator` of its pointer placeholders (a CPU tensor would give a generic pointer)."""

    def __init__(self, tensor, assumed_align=16):
        self.assumed_align, self.element_type = assumed_align, cutlass.Uint8

    @property
    def iterator(self):
        return cute.runtime.make_ptr(self.element_type, 1 << 20, cute.AddressSpace.gmem, assumed_align=self.assumed_align)


cute.runtime.from_dlpack = GmemPlaceholder  # imported inside that compile()
dd.cute.compile = spy


class GmemPlaceholder:
    """Stands in for from_dlpack(device buffer) in DiscreteGroupedGemmDswigluSm100.compile(), which
    only takes `.iterator` of its pointer placeholders (a CPU tensor would give a generic pointer)."""

    def __init__(self, tensor, assumed_align=16):
        self.assumed_align, self.element_type = assumed_align, cutlass.Uint8

    @property
    def iterator(self):
        return cute.runtime.make_ptr(self.element_type, 1 << 20, cute.AddressSpace.gmem, assumed_align=self.assumed_align)


cute.runtime.from_dlpack = GmemPlaceholder  # imported inside that compile()


def sf_tensor(rows, cols, groups, vec, dtype):
    """Scale factors in the seed's permuted layout: a dense (groups, rows/128, rest, 32, 4, 4)
    buffer viewed as (32, 4, rows/128, 4, rest, groups)."""
    rest = -(-(-(-cols // vec)) // 4)
    base = torch.empty((groups, -(-rows // 128), rest, 32, 4, 4), dtype=torch.uint8).view(dtype)
    return base.permute(3, 4, 1, 5, 2, 0)


def mx(rows, cols, dtype):
    """(rows, cols, 1) row-major, strides (cols, 1, rows*cols) as cuDNN FE checks them."""
    return torch.empty((1, rows, cols), dtype=torch.uint8 if dtype.itemsize == 1 else dtype).view(dtype).permute(1, 2, 0)


def per_row(rows):
    return torch.empty((1, 1, rows), dtype=torch.float32).permute(2, 1, 0)


M, N, K, L = args.m, args.n, args.k, args.experts
fp4 = args.recipe == "nvfp4"
ab = torch.float4_e2m1fn_x2 if fp4 else torch.float8_e4m3fn
sf = torch.float8_e4m3fn if fp4 else torch.float8_e8m0fnu
vec = 16 if fp4 else 32
d_dtype = torch.bfloat16 if fp4 else torch.float8_e4m3fn
kp = K // 2 if fp4 else K
a = mx(M, kp, ab)
c = mx(M, 2 * N, torch.bfloat16)
d_row = mx(M, 2 * N, d_dtype)
d_col = mx(M, 2 * N, d_dtype)
sfa = sf_tensor(M, K, 1, vec, sf)
f32 = torch.float32
common = dict(
    sample_a=a, sample_c=c, sample_d_row=d_row, sample_d_col=d_col, sample_sfa=sfa,
    sample_padded_offsets=torch.empty((L,), dtype=torch.int32),
    sample_alpha=torch.empty((L,), dtype=f32), sample_beta=torch.empty((L,), dtype=f32),
    sample_prob=per_row(M), sample_dprob=per_row(M),
    sample_dbias=torch.empty((L, 2 * N, 1), dtype=torch.bfloat16) if args.dbias else None,
    sf_vec_size=vec, act_func=args.act, mma_tiler_mn=(256, 256),
)
if not fp4:  # MXFP8 in / FP8 out: the kernel generates SFD, and wants amax too
    common.update(sample_sfd_row=sf_tensor(M, 2 * N, 1, vec, sf), sample_sfd_col=sf_tensor(2 * N, M, 1, vec, sf),
                  sample_amax=torch.empty((L, 2, 1), dtype=f32), sample_norm_const=torch.empty((1,), dtype=f32))
if args.api == "discrete_dswiglu":
    args.discrete = True
    api = dd.DiscreteGroupedGemmDswigluSm100(**common, num_experts=L, b_shape=(N, K), b_dtype=ab)
elif args.discrete:
    api = GroupedGemmDgluBlockScaledAPI(**common, num_experts=L, b_shape=(N, K), b_dtype=ab)
else:
    b = torch.empty((L, N, kp), dtype=torch.uint8).view(ab).permute(1, 2, 0)
    api = GroupedGemmDgluBlockScaledAPI(**common, sample_b=b, sample_sfb=sf_tensor(N, K, L, vec, sf))
api.check_support()
t0 = time.time()
api.compile()
total = time.time() - t0
cubin = captured["compiled"].__cubin__
name = f"jit_{'' if args.api == 'dglu' else args.api + '_'}{args.recipe}_{args.act}_{'discrete' if args.discrete else 'dense'}{'_dbias' if args.dbias else ''}_{args.arch}_L{L}"
(out / f"{name}.cubin").write_bytes(cubin)
print(json.dumps({"name": name, "dynamic_mnkl": os.environ.get("CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL", "1"),
                  "options": captured["options"], "compile_s": round(captured["compile_s"], 2),
                  "api_compile_s": round(total, 2), "cubin_bytes": len(cubin)}))
