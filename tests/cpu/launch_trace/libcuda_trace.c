/* A stand-in libcuda.so.1 that answers CUDA_SUCCESS and RECORDS driver calls as JSON lines, for the
   launch-parity tests (tests/cpu/test_sm100_launch_parity.py): both cuDNN FE's DSL host code and dglu's
   runtime launch through it. Build:  gcc -O2 -shared -fPIC -o libcuda.so.1 libcuda_trace.c
   Env:  FAKECUDA_DRIVER_VERSION=<v>    what cuDriverGetVersion answers (default 13000)
         FAKECUDA_ACTIVE_CLUSTERS=<n>  what cuOccupancyMaxActiveClusters answers (default 74: a B200's 148 SMs / 2)
   Env:  FAKECUDA_TRACE=<file>     JSON-lines trace (default: stderr)
         FAKECUDA_DUMP_DIR=<dir>   write every loaded cubin (ELF, unwrapped from a fatbin) there as image_<n>.cubin
         FAKECUDA_CC=<major><minor> compute capability answered (default 100)
         FAKECUDA_CTX_CURRENT=1    the primary context is current from the start
         FAKECUDA_LOG_PROC=1       also record every cuGetProcAddress lookup (hits and misses)
   Tensor maps: cuTensorMapEncodeTiled writes a self-describing 128-byte map ("TMAP" + its arguments),
   so the kernel-parameter bytes of a launch can be decoded back to the encode call that made them.
   Kernel parameters: layout (ordinal, offset, size) is read from the cubin's EIATTR_KPARAM_INFO
   records at cuLibraryLoadData/cuModuleLoadData time. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <pthread.h>

typedef int CUresult;
typedef void* CUcontext; typedef void* CUstream; typedef void* CUmodule; typedef void* CUfunction;
typedef void* CUlibrary; typedef void* CUkernel;
typedef unsigned long long CUdeviceptr;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE* out = NULL; static unsigned long long seq = 0;
static FILE* tr(void) {
  if (!out) { const char* p = getenv("FAKECUDA_TRACE"); out = p ? fopen(p, "a") : stderr; if (!out) out = stderr; }
  return out;
}
#define BEGIN(name) pthread_mutex_lock(&mu); FILE* f_ = tr(); fprintf(f_, "{\"seq\":%llu,\"fn\":\"%s\"", seq++, name)
#define END() fprintf(f_, "}\n"); fflush(f_); pthread_mutex_unlock(&mu)
static void hex(FILE* f, const void* p, size_t n) { const unsigned char* b = p; fputc('"', f);
  for (size_t i = 0; i < n; i++) { fprintf(f, "%02x", b[i]); } fputc('"', f); }
static uint64_t fnv(const void* p, size_t n) { const unsigned char* b = p; uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; } return h; }

/* ---------------- kernels, parsed from the cubin ---------------- */
#define MAXP 128
typedef struct { char name[512]; int np; int ord[MAXP], off[MAXP], size[MAXP]; int bytes; void* lib; } Kern;
typedef struct { int id; size_t size, elf_off; uint64_t hash; int nk; Kern* k[64]; } Lib;   /* elf_off: ELF start inside a fatbin */
static Lib* libs[256]; static int nlibs = 0;

typedef struct { unsigned char ident[16]; uint16_t type, machine; uint32_t version; uint64_t entry, phoff, shoff;
  uint32_t flags; uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx; } Ehdr;
typedef struct { uint32_t name, type; uint64_t flags, addr, offset, size; uint32_t link, info; uint64_t align, entsize; } Shdr;

static size_t elf_size(const unsigned char* d) {
  const Ehdr* e = (const Ehdr*)d; size_t end = e->shoff + (size_t)e->shnum * e->shentsize;
  size_t ph = e->phoff + (size_t)e->phnum * e->phentsize; if (ph > end) end = ph;
  for (int i = 0; i < e->shnum; i++) { const Shdr* s = (const Shdr*)(d + e->shoff + (size_t)i * e->shentsize);
    if (s->type != 8 && s->offset + s->size > end) end = s->offset + s->size; }
  return end;
}
static Lib* parse_image(const void* image) {
  const unsigned char* d = image; Lib* L = calloc(1, sizeof(Lib)); L->id = nlibs;
  if (nlibs < 256) libs[nlibs++] = L;
  { uint32_t magic; memcpy(&magic, d, 4); BEGIN("image_head"); fprintf(f_, ",\"lib\":%d,\"head\":", L->id); hex(f_, d, 64); END();
    if (magic == 0xBA55ED50u) {   /* fatbin container: u32 magic, u16 version, u16 header size, u64 payload size; take the first ELF inside */
      uint16_t hs; uint64_t fs; memcpy(&hs, d + 6, 2); memcpy(&fs, d + 8, 8);
      for (uint64_t o = hs; o + 4 <= hs + fs; o += 4) if (memcmp(d + o, "\x7f" "ELF", 4) == 0) { d += o; break; }
    } }
  if (memcmp(d, "\x7f" "ELF", 4) != 0) { L->size = 0; return L; }   /* ptx or compressed: not parsed */
  L->elf_off = (size_t)(d - (const unsigned char*)image);
  L->size = elf_size(d); L->hash = fnv(d, L->size);
  const Ehdr* e = (const Ehdr*)d; const Shdr* sh = (const Shdr*)(d + e->shoff);
  const char* shstr = (const char*)(d + sh[e->shstrndx].offset);
  for (int i = 0; i < e->shnum; i++) {
    const char* nm = shstr + sh[i].name;
    if (strncmp(nm, ".nv.info.", 9) != 0 || L->nk >= 64) continue;
    Kern* k = calloc(1, sizeof(Kern)); snprintf(k->name, sizeof k->name, "%s", nm + 9); k->lib = L;
    const unsigned char* s = d + sh[i].offset; size_t n = sh[i].size, pos = 0;
    while (pos + 4 <= n) {
      unsigned fmt = s[pos], attr = s[pos + 1], val = s[pos + 2] | (s[pos + 3] << 8); pos += 4;
      if (fmt == 4) {   /* EIFMT_SVAL: payload of val bytes */
        if (attr == 0x17 && k->np < MAXP) {  /* EIATTR_KPARAM_INFO: u32 index, u16 ordinal, u16 offset, u32 packed */
          uint16_t ord, off; uint32_t packed; memcpy(&ord, s + pos + 4, 2); memcpy(&off, s + pos + 6, 2); memcpy(&packed, s + pos + 8, 4);
          k->ord[k->np] = ord; k->off[k->np] = off; k->size[k->np] = (packed >> 18) & 0x3FFF;
          if (off + k->size[k->np] > k->bytes) { k->bytes = off + k->size[k->np]; } k->np++;
        }
        pos += val;
      }
    }
    for (int a = 1; a < k->np; a++) for (int b = a; b > 0 && k->ord[b - 1] > k->ord[b]; b--) {  /* sort by ordinal */
      int t; t = k->ord[b]; k->ord[b] = k->ord[b - 1]; k->ord[b - 1] = t; t = k->off[b]; k->off[b] = k->off[b - 1]; k->off[b - 1] = t;
      t = k->size[b]; k->size[b] = k->size[b - 1]; k->size[b - 1] = t; }
    L->k[L->nk++] = k;
  }
  return L;
}
static void dump_image(const void* image, Lib* L) {
  const char* dir = getenv("FAKECUDA_DUMP_DIR"); if (!dir || !L->size) return;
  char path[4096]; snprintf(path, sizeof path, "%s/image_%d.cubin", dir, L->id);
  FILE* f = fopen(path, "wb"); if (f) { fwrite((const unsigned char*)image + L->elf_off, 1, L->size, f); fclose(f); }
}
static void log_lib(FILE* f, Lib* L) {
  fprintf(f, ",\"lib\":%d,\"image_bytes\":%zu,\"fnv64\":\"%016llx\",\"kernels\":[", L->id, L->size, (unsigned long long)L->hash);
  for (int i = 0; i < L->nk; i++) fprintf(f, "%s{\"name\":\"%s\",\"nparams\":%d,\"param_bytes\":%d}", i ? "," : "", L->k[i]->name, L->k[i]->np, L->k[i]->bytes);
  fputc(']', f);
}
static Kern* find_kernel(Lib* L, const char* name) {
  for (int i = 0; L && i < L->nk; i++) if (strcmp(L->k[i]->name, name) == 0) return L->k[i];
  Kern* k = calloc(1, sizeof(Kern)); snprintf(k->name, sizeof k->name, "%s", name); k->np = -1; return k;
}

/* ---------------- device / context ---------------- */
static CUcontext current = 0; static CUcontext stack[64]; static int depth = 0;
static const CUcontext PRIMARY = (CUcontext)0xC0; static int ctx_init = 0;
static void init_ctx(void) { if (!ctx_init) { ctx_init = 1; const char* e = getenv("FAKECUDA_CTX_CURRENT"); if (e && e[0] == '1') current = PRIMARY; } }
static CUcontext top(void) { init_ctx(); return depth ? stack[depth - 1] : current; }
static int cc(void) { const char* e = getenv("FAKECUDA_CC"); return e ? atoi(e) : 100; }
static CUdeviceptr next_address = 0x10000;

#define SIMPLE(name) BEGIN(#name); END()
CUresult cuInit(unsigned flags) { SIMPLE(cuInit); return 0; }
CUresult cuDriverGetVersion(int* v) { const char* e = getenv("FAKECUDA_DRIVER_VERSION"); *v = e ? atoi(e) : 13000; return 0; }
CUresult cuGetErrorName(CUresult e, const char** s) { *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult e, const char** s) { *s = "fake error"; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGetName(char* name, int len, int dev) { strncpy(name, "NVIDIA B200 (stand-in)", len); return 0; }
CUresult cuDeviceTotalMem_v2(size_t* b, int dev) { *b = (size_t)180 << 30; return 0; }
CUresult cuDeviceGetUuid(unsigned char* u, int dev) { memset(u, 0x42, 16); return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  switch (attr) { case 75: *v = cc() / 10; break; case 76: *v = cc() % 10; break; case 16: *v = 148; break;
    case 97: *v = 232448; break; case 1: *v = 1024; break; case 8: *v = 49152; break; case 10: *v = 32; break;
    case 81: *v = 233472; break; case 82: *v = 65536; break; case 39: *v = 2048; break; case 106: *v = 32; break;
    case 120: *v = 1; break; default: *v = 0; }
  BEGIN("cuDeviceGetAttribute"); fprintf(f_, ",\"attr\":%d,\"value\":%d", attr, *v); END(); return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, int dev) { *c = PRIMARY; SIMPLE(cuDevicePrimaryCtxRetain); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { SIMPLE(cuDevicePrimaryCtxRelease); return 0; }
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned* flags, int* active) { *flags = 0; *active = 1; return 0; }
CUresult cuCtxGetCurrent(CUcontext* c) { *c = top(); return 0; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { init_ctx(); stack[depth++] = c; return 0; }
CUresult cuCtxPopCurrent_v2(CUcontext* c) { CUcontext t = depth ? stack[--depth] : current; if (c) *c = t; return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { init_ctx(); current = c; return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuCtxGetApiVersion(CUcontext c, unsigned* v) { *v = 13000; return 0; }
CUresult cuCtxSynchronize(void) { SIMPLE(cuCtxSynchronize); return 0; }
CUresult cuStreamGetCtx(CUstream s, CUcontext* c) { *c = PRIMARY; return 0; }
CUresult cuStreamIsCapturing(CUstream s, int* status) { *status = 0; return 0; }
CUresult cuThreadExchangeStreamCaptureMode(int* mode) { *mode = 0; return 0; }
CUresult cuStreamSynchronize(CUstream s) { BEGIN("cuStreamSynchronize"); fprintf(f_, ",\"stream\":\"%p\"", s); END(); return 0; }

/* ---------------- modules / libraries / kernels ---------------- */
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  Lib* L = parse_image(image); dump_image(image, L); *m = (CUmodule)L;
  BEGIN("cuModuleLoadData"); log_lib(f_, L); END(); return 0;
}
CUresult cuModuleGetFunction(CUfunction* fn, CUmodule m, const char* name) {
  Kern* k = find_kernel((Lib*)m, name); *fn = (CUfunction)k;
  BEGIN("cuModuleGetFunction"); fprintf(f_, ",\"name\":\"%s\",\"nparams\":%d,\"param_bytes\":%d", name, k->np, k->bytes); END(); return 0;
}
CUresult cuModuleUnload(CUmodule m) { SIMPLE(cuModuleUnload); return 0; }
CUresult cuLibraryLoadData(CUlibrary* lib, const void* code, void* jo, void** jv, unsigned nj, void* lo, void** lv, unsigned nl) {
  Lib* L = parse_image(code); dump_image(code, L); *lib = (CUlibrary)L;
  BEGIN("cuLibraryLoadData"); log_lib(f_, L); fprintf(f_, ",\"n_jit_options\":%u,\"n_library_options\":%u", nj, nl); END(); return 0;
}
CUresult cuLibraryUnload(CUlibrary lib) { SIMPLE(cuLibraryUnload); return 0; }
CUresult cuLibraryGetKernel(CUkernel* kp, CUlibrary lib, const char* name) {
  Kern* k = find_kernel((Lib*)lib, name); *kp = (CUkernel)k;
  BEGIN("cuLibraryGetKernel"); fprintf(f_, ",\"name\":\"%s\",\"nparams\":%d,\"param_bytes\":%d", name, k->np, k->bytes); END(); return 0;
}
CUresult cuLibraryGetModule(CUmodule* m, CUlibrary lib) { *m = (CUmodule)lib; return 0; }
CUresult cuKernelGetFunction(CUfunction* fn, CUkernel k) { *fn = (CUfunction)k;
  BEGIN("cuKernelGetFunction"); fprintf(f_, ",\"name\":\"%s\"", ((Kern*)k)->name); END(); return 0; }
CUresult cuKernelGetName(const char** name, CUkernel k) { *name = ((Kern*)k)->name; return 0; }
CUresult cuFuncGetName(const char** name, CUfunction k) { *name = ((Kern*)k)->name; return 0; }
CUresult cuFuncSetAttribute(CUfunction fn, int attr, int value) {
  BEGIN("cuFuncSetAttribute"); fprintf(f_, ",\"name\":\"%s\",\"attr\":%d,\"value\":%d", ((Kern*)fn)->name, attr, value); END(); return 0; }
CUresult cuKernelSetAttribute(int attr, int value, CUkernel k, int dev) {
  BEGIN("cuKernelSetAttribute"); fprintf(f_, ",\"name\":\"%s\",\"attr\":%d,\"value\":%d,\"dev\":%d", ((Kern*)k)->name, attr, value, dev); END(); return 0; }
CUresult cuFuncGetAttribute(int* v, int attr, CUfunction fn) { *v = (attr == 0) ? 1024 : 0;
  BEGIN("cuFuncGetAttribute"); fprintf(f_, ",\"attr\":%d", attr); END(); return 0; }
CUresult cuKernelGetAttribute(int* v, int attr, CUkernel k, int dev) { *v = (attr == 0) ? 1024 : 0;
  BEGIN("cuKernelGetAttribute"); fprintf(f_, ",\"attr\":%d", attr); END(); return 0; }
CUresult cuFuncGetParamInfo(CUfunction fn, size_t i, size_t* off, size_t* size) { Kern* k = fn;
  if (k->np < 0 || (int)i >= k->np) return 1; for (int j = 0; j < k->np; j++) if (k->ord[j] == (int)i) { *off = k->off[j]; if (size) *size = k->size[j]; } return 0; }
CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t* off, size_t* size) { return cuFuncGetParamInfo(k, i, off, size); }
CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction fn, const void* cfg) {
  const char* e = getenv("FAKECUDA_ACTIVE_CLUSTERS"); *n = e ? atoi(e) : 74;
  BEGIN("cuOccupancyMaxActiveClusters"); fprintf(f_, ",\"name\":\"%s\",\"answered\":%d", ((Kern*)fn)->name, *n); END(); return 0; }

/* ---------------- memory ---------------- */
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t size, CUstream s) { *p = next_address; next_address = (next_address + size + 511) / 512 * 512;
  BEGIN("cuMemAllocAsync"); fprintf(f_, ",\"bytes\":%zu,\"ptr\":\"0x%llx\"", size, *p); END(); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) { return cuMemAllocAsync(p, size, 0); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return 0; }
CUresult cuMemFree_v2(CUdeviceptr p) { return 0; }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) {
  BEGIN("cuMemsetD32Async"); fprintf(f_, ",\"ptr\":\"0x%llx\",\"value\":%u,\"n\":%zu", p, v, n); END(); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  BEGIN("cuMemsetD8Async"); fprintf(f_, ",\"ptr\":\"0x%llx\",\"value\":%u,\"n\":%zu", p, v, n); END(); return 0; }

/* ---------------- tensor maps ---------------- */
static unsigned long long n_encode = 0;
CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* addr, const uint64_t* dims,
    const uint64_t* strides, const uint32_t* box, const uint32_t* es, int interleave, int swizzle, int l2, int oob) {
  unsigned char m[128]; memset(m, 0, 128); uint32_t magic = 0x50414D54; memcpy(m, &magic, 4);
  m[4] = dtype; m[5] = rank; m[6] = interleave; m[7] = swizzle; m[8] = l2; m[9] = oob; memcpy(m + 16, &addr, 8);
  for (unsigned i = 0; i < rank && i < 5; i++) { memcpy(m + 24 + 8 * i, &dims[i], 8); uint16_t b = box[i]; memcpy(m + 96 + 2 * i, &b, 2); m[106 + i] = es[i]; }
  for (unsigned i = 0; i + 1 < rank && i < 4; i++) memcpy(m + 64 + 8 * i, &strides[i], 8);
  memcpy(map, m, 128);
  BEGIN("cuTensorMapEncodeTiled");
  fprintf(f_, ",\"index\":%llu,\"map_ptr\":\"%p\",\"dtype\":%d,\"rank\":%u,\"addr\":\"%p\",\"dims\":[", n_encode++, map, dtype, rank, addr);
  for (unsigned i = 0; i < rank; i++) fprintf(f_, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
  fprintf(f_, "],\"strides_bytes\":[");
  for (unsigned i = 0; i + 1 < rank; i++) fprintf(f_, "%s%llu", i ? "," : "", (unsigned long long)strides[i]);
  fprintf(f_, "],\"box\":[");
  for (unsigned i = 0; i < rank; i++) fprintf(f_, "%s%u", i ? "," : "", box[i]);
  fprintf(f_, "],\"element_strides\":[");
  for (unsigned i = 0; i < rank; i++) fprintf(f_, "%s%u", i ? "," : "", es[i]);
  fprintf(f_, "],\"interleave\":%d,\"swizzle\":%d,\"l2_promotion\":%d,\"oob_fill\":%d", interleave, swizzle, l2, oob);
  END(); return 0;
}

/* ---------------- launches ---------------- */
typedef struct { unsigned gx, gy, gz, bx, by, bz, smem; CUstream stream; struct { int id; int pad; unsigned char v[64]; }* attrs; unsigned nattrs; } LaunchConfig;
static void log_params(FILE* f, Kern* k, void** params, void** extra) {
  fprintf(f, ",\"kernel\":\"%s\",\"nparams\":%d,\"param_bytes\":%d", k->name, k->np, k->bytes);
  if (params && k->np > 0) {
    unsigned char* buf = calloc(1, k->bytes ? k->bytes : 1);
    fprintf(f, ",\"params\":[");
    for (int j = 0; j < k->np; j++) { int i = j;   /* sorted by ordinal */
      memcpy(buf + k->off[i], params[k->ord[i]], k->size[i]);
      fprintf(f, "%s{\"i\":%d,\"off\":%d,\"size\":%d,\"bytes\":", j ? "," : "", k->ord[i], k->off[i], k->size[i]);
      hex(f, params[k->ord[i]], k->size[i]); fputc('}', f); }
    fprintf(f, "],\"param_buffer\":"); hex(f, buf, k->bytes); fprintf(f, ",\"param_fnv64\":\"%016llx\"", (unsigned long long)fnv(buf, k->bytes));
    free(buf);
  }
  if (extra) { /* CU_LAUNCH_PARAM_BUFFER_POINTER=1, _SIZE=2, _END=0 */
    void* bp = 0; size_t bs = 0;
    for (int i = 0; extra[i] != 0 && i < 16; i += 2) { if ((uintptr_t)extra[i] == 1) bp = extra[i + 1]; if ((uintptr_t)extra[i] == 2) bs = *(size_t*)extra[i + 1]; }
    fprintf(f, ",\"extra_buffer_size\":%zu,\"extra_buffer\":", bs); if (bp) hex(f, bp, bs); else fprintf(f, "null");
  }
}
CUresult cuLaunchKernelEx(const LaunchConfig* c, CUfunction fn, void** params, void** extra) {
  BEGIN("cuLaunchKernelEx");
  fprintf(f_, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"stream\":\"%p\",\"attrs\":[", c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->stream);
  for (unsigned i = 0; i < c->nattrs; i++) { unsigned u[4]; memcpy(u, c->attrs[i].v, 16);
    fprintf(f_, "%s{\"id\":%d,\"u32\":[%u,%u,%u,%u]}", i ? "," : "", c->attrs[i].id, u[0], u[1], u[2], u[3]); }
  fputc(']', f_); log_params(f_, (Kern*)fn, params, extra); END(); return 0;
}
CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void** params, void** extra) {
  BEGIN("cuLaunchKernel");
  fprintf(f_, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"stream\":\"%p\"", gx, gy, gz, bx, by, bz, smem, s);
  log_params(f_, (Kern*)fn, params, extra); END(); return 0;
}

/* ---------------- CuTe DSL runtime entry points (libcute_dsl_runtime.so's thin cudart wrappers) ----------------
   The DSL's host code (JIT or export_to_c object) calls only these eight symbols; inside libcute_dsl_runtime they
   jump into a statically linked cudart, which needs the driver's private export tables (cuGetExportTable).
   Defining them here and LD_PRELOADing this library (or linking the exported .o against it) bypasses cudart. */
typedef struct { unsigned gx, gy, gz, bx, by, bz; size_t smem; void* stream;
                 struct { int id; int pad; unsigned char v[64]; }* attrs; unsigned nattrs; } RtLaunchConfig;
int _cudaLibraryLoadData(void** lib, const void* code, void* jo, void** jv, unsigned nj, void* lo, void** lv, unsigned nl) {
  Lib* L = parse_image(code); dump_image(code, L); *lib = L;
  BEGIN("_cudaLibraryLoadData"); log_lib(f_, L); fprintf(f_, ",\"n_jit_options\":%u,\"n_library_options\":%u", nj, nl); END(); return 0;
}
int _cudaLibraryGetKernel(void** kp, void* lib, const char* name) {
  Kern* k = find_kernel((Lib*)lib, name); *kp = k;
  BEGIN("_cudaLibraryGetKernel"); fprintf(f_, ",\"name\":\"%s\",\"nparams\":%d,\"param_bytes\":%d", name, k->np, k->bytes); END(); return 0;
}
int _cudaGetDevice(int* d) { *d = 0; SIMPLE(_cudaGetDevice); return 0; }
int _cudaDeviceGetAttribute(int* v, int attr, int dev) {
  int r = cuDeviceGetAttribute(v, attr, dev);
  BEGIN("_cudaDeviceGetAttribute"); fprintf(f_, ",\"attr\":%d,\"dev\":%d,\"value\":%d", attr, dev, *v); END(); return r;
}
int _cudaFuncSetAttribute(const void* fn, int attr, int value) {
  BEGIN("_cudaFuncSetAttribute"); fprintf(f_, ",\"name\":\"%s\",\"attr\":%d,\"value\":%d", ((Kern*)fn)->name, attr, value); END(); return 0; }
int _cudaKernelSetAttributeForDevice(void* k, int attr, int value, int dev) {
  BEGIN("_cudaKernelSetAttributeForDevice"); fprintf(f_, ",\"name\":\"%s\",\"attr\":%d,\"value\":%d,\"dev\":%d", ((Kern*)k)->name, attr, value, dev); END(); return 0; }
int _cuKernelGetAttribute(int* v, int attr, void* k, int dev) {
  const char* e = getenv("FAKECUDA_KERNEL_ATTR_VALUE"); *v = e ? atoi(e) : 0;
  BEGIN("_cuKernelGetAttribute"); fprintf(f_, ",\"name\":\"%s\",\"attr\":%d,\"dev\":%d,\"answered\":%d", ((Kern*)k)->name, attr, dev, *v); END(); return 0; }
int _cudaLaunchKernelEx(const RtLaunchConfig* c, const void* fn, void** args) {
  BEGIN("_cudaLaunchKernelEx");
  fprintf(f_, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%zu,\"stream\":\"%p\",\"attrs\":[", c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->stream);
  for (unsigned i = 0; i < c->nattrs; i++) { unsigned u[4]; memcpy(u, c->attrs[i].v, 16);
    fprintf(f_, "%s{\"id\":%d,\"u32\":[%u,%u,%u,%u]}", i ? "," : "", c->attrs[i].id, u[0], u[1], u[2], u[3]); }
  fputc(']', f_); log_params(f_, (Kern*)fn, args, NULL); END(); return 0;
}

/* ---------------- private tables (static cudart asks for these) ---------------- */
CUresult cuGetExportTable(const void** table, const unsigned char* uuid) {
  *table = NULL; BEGIN("cuGetExportTable"); fprintf(f_, ",\"uuid\":"); hex(f_, uuid, 16); fprintf(f_, ",\"answer\":\"NOT_FOUND\""); END();
  return 500;
}

/* ---------------- lookup ---------------- */
#define E(n) { #n, (void*)n }
#define A(n, fn) { #n, (void*)fn }
static struct { const char* name; void* fn; } table[] = {
  E(cuInit), E(cuDriverGetVersion), E(cuGetErrorName), E(cuGetErrorString), E(cuDeviceGet), E(cuDeviceGetCount),
  E(cuDeviceGetName), A(cuDeviceTotalMem, cuDeviceTotalMem_v2), E(cuDeviceGetUuid), A(cuDeviceGetUuid_v2, cuDeviceGetUuid),
  E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxRetain), A(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2),
  E(cuDevicePrimaryCtxGetState), E(cuCtxGetCurrent), A(cuCtxPushCurrent, cuCtxPushCurrent_v2),
  A(cuCtxPopCurrent, cuCtxPopCurrent_v2), E(cuCtxSetCurrent), E(cuCtxGetDevice), E(cuCtxGetApiVersion), E(cuCtxSynchronize),
  E(cuStreamGetCtx), E(cuStreamIsCapturing), E(cuStreamSynchronize), E(cuThreadExchangeStreamCaptureMode), E(cuModuleLoadData), E(cuModuleGetFunction),
  E(cuModuleUnload), E(cuLibraryLoadData), E(cuLibraryUnload), E(cuLibraryGetKernel), E(cuLibraryGetModule),
  E(cuKernelGetFunction), E(cuKernelGetName), E(cuFuncGetName), E(cuFuncSetAttribute), E(cuKernelSetAttribute),
  E(cuFuncGetAttribute), E(cuKernelGetAttribute), E(cuFuncGetParamInfo), E(cuKernelGetParamInfo),
  E(cuOccupancyMaxActiveClusters), E(cuMemAllocAsync), A(cuMemAlloc, cuMemAlloc_v2), E(cuMemFreeAsync),
  A(cuMemFree, cuMemFree_v2), E(cuMemsetD32Async), E(cuMemsetD8Async), E(cuLaunchKernelEx), E(cuLaunchKernel),
  E(cuTensorMapEncodeTiled), E(cuGetExportTable),
};
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* status) {
  int found = -1;
  if (strcmp(symbol, "cuGetProcAddress") == 0) {   /* static cudart asks for the lookup itself (11030: old ABI, 12000: _v2) */
    const char* lp0 = getenv("FAKECUDA_LOG_PROC");
    if (lp0 && lp0[0] == '1') { BEGIN("cuGetProcAddress"); fprintf(f_, ",\"symbol\":\"%s\",\"version\":%d,\"found\":true", symbol, version); END(); }
    *pfn = version >= 12000 ? (void*)cuGetProcAddress_v2 : (void*)cuGetProcAddress; if (status) *status = 0; return 0;
  }
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) if (strcmp(symbol, table[i].name) == 0) { found = (int)i; break; }
  const char* lp = getenv("FAKECUDA_LOG_PROC");
  if ((lp && lp[0] == '1') ) { BEGIN("cuGetProcAddress"); fprintf(f_, ",\"symbol\":\"%s\",\"version\":%d,\"found\":%s", symbol, version, found >= 0 ? "true" : "false"); END(); }
  if (found >= 0) { *pfn = table[found].fn; if (status) *status = 0; return 0; }
  *pfn = NULL; if (status) *status = 1; return 500; /* CUDA_ERROR_NOT_FOUND */
}
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
