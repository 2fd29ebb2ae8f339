/* A stand-in libcuda.so.1 for timing cuda-bindings' own marshalling on a CPU-only host:
   every entry point answers CUDA_SUCCESS at once and counts its calls (bench.standin_host).
   Build: cc -O2 -shared -fPIC -o DIR/libcuda.so.1 bench/standin_libcuda.c; put DIR on
   LD_LIBRARY_PATH. */
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>

typedef int CUresult;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;

enum { F_cuInit, F_cuDriverGetVersion, F_cuGetErrorName, F_cuGetErrorString, F_cuDeviceGet,
  F_cuDeviceGetCount, F_cuDeviceGetName, F_cuDeviceGetAttribute, F_cuDevicePrimaryCtxRetain,
  F_cuCtxGetCurrent, F_cuCtxPushCurrent, F_cuCtxPopCurrent, F_cuCtxSetCurrent, F_cuCtxGetDevice,
  F_cuStreamGetCtx, F_cuStreamIsCapturing, F_cuModuleLoadData, F_cuModuleGetFunction,
  F_cuFuncSetAttribute, F_cuMemAllocAsync, F_cuMemFreeAsync, F_cuMemAlloc, F_cuMemFree,
  F_cuStreamSynchronize, F_cuThreadExchangeStreamCaptureMode, F_cuMemsetD32Async,
  F_cuMemsetD8Async, F_cuLaunchKernelEx, F_cuLaunchKernel, F_cuTensorMapEncodeTiled, F_N };
static const char* names[F_N] = { "cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString",
  "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceGetAttribute",
  "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent",
  "cuCtxSetCurrent", "cuCtxGetDevice", "cuStreamGetCtx", "cuStreamIsCapturing", "cuModuleLoadData",
  "cuModuleGetFunction", "cuFuncSetAttribute", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAlloc",
  "cuMemFree", "cuStreamSynchronize", "cuThreadExchangeStreamCaptureMode",
  "cuMemsetD32Async", "cuMemsetD8Async", "cuLaunchKernelEx", "cuLaunchKernel",
  "cuTensorMapEncodeTiled" };
static unsigned long long counts[F_N];
static CUcontext current = 0;      /* FAKECUDA_CTX_CURRENT=1: the primary context is current (as under torch) */
static CUcontext stack[64]; static int depth = 0;
static const CUcontext PRIMARY = (CUcontext)0xC0;
static CUdeviceptr next_address = 0x10000;
static unsigned long long next_handle = 0x1000;
static int ctx_init = 0;

static void init_ctx(void) {
  if (!ctx_init) { ctx_init = 1; const char* e = getenv("FAKECUDA_CTX_CURRENT"); if (e && e[0] == '1') current = PRIMARY; }
}
static CUcontext top(void) { init_ctx(); return depth ? stack[depth - 1] : current; }

CUresult cuInit(unsigned flags) { counts[F_cuInit]++; return 0; }
CUresult cuDriverGetVersion(int* v) { counts[F_cuDriverGetVersion]++; *v = 13000; return 0; }
CUresult cuGetErrorName(CUresult e, const char** s) { counts[F_cuGetErrorName]++; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult e, const char** s) { counts[F_cuGetErrorString]++; *s = "fake error"; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { counts[F_cuDeviceGet]++; *d = ordinal; return 0; }
CUresult cuDeviceGetCount(int* n) { counts[F_cuDeviceGetCount]++; *n = 1; return 0; }
CUresult cuDeviceGetName(char* name, int len, int dev) { counts[F_cuDeviceGetName]++; strncpy(name, "NVIDIA H200", len); return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  counts[F_cuDeviceGetAttribute]++;
  switch (attr) { case 75: *v = 9; break; case 76: *v = 0; break; case 16: *v = 132; break;
                  case 97: *v = 232448; break; default: *v = 0; }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, int dev) { counts[F_cuDevicePrimaryCtxRetain]++; *c = PRIMARY; return 0; }
CUresult cuCtxGetCurrent(CUcontext* c) { counts[F_cuCtxGetCurrent]++; *c = top(); return 0; }
CUresult cuCtxPushCurrent(CUcontext c) { counts[F_cuCtxPushCurrent]++; init_ctx(); stack[depth++] = c; return 0; }
CUresult cuCtxPopCurrent(CUcontext* c) { counts[F_cuCtxPopCurrent]++; CUcontext t = stack[--depth]; if (c) *c = t; return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { counts[F_cuCtxSetCurrent]++; init_ctx(); current = c; return 0; }
CUresult cuCtxGetDevice(int* d) { counts[F_cuCtxGetDevice]++; *d = 0; return 0; }
CUresult cuStreamGetCtx(CUstream s, CUcontext* c) { counts[F_cuStreamGetCtx]++; *c = PRIMARY; return 0; }
CUresult cuStreamIsCapturing(CUstream s, int* status) { counts[F_cuStreamIsCapturing]++; *status = 0; return 0; }
CUresult cuModuleLoadData(CUmodule* m, const void* image) { counts[F_cuModuleLoadData]++; *m = (CUmodule)(next_handle++); return 0; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) { counts[F_cuModuleGetFunction]++; *f = (CUfunction)(next_handle++); return 0; }
CUresult cuFuncSetAttribute(CUfunction f, int attr, int value) { counts[F_cuFuncSetAttribute]++; return 0; }
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t size, CUstream s) {
  counts[F_cuMemAllocAsync]++; *p = next_address; next_address = (next_address + size + 511) / 512 * 512; return 0;
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { counts[F_cuMemFreeAsync]++; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
  counts[F_cuMemAlloc]++; *p = next_address; next_address = (next_address + size + 511) / 512 * 512; return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { counts[F_cuMemFree]++; return 0; }
CUresult cuStreamSynchronize(CUstream s) { counts[F_cuStreamSynchronize]++; return 0; }
CUresult cuThreadExchangeStreamCaptureMode(int* mode) { counts[F_cuThreadExchangeStreamCaptureMode]++; *mode = 0; return 0; }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) { counts[F_cuMemsetD32Async]++; return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { counts[F_cuMemsetD8Async]++; return 0; }
CUresult cuLaunchKernelEx(const void* config, CUfunction f, void** params, void** extra) { counts[F_cuLaunchKernelEx]++; return 0; }
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void** params, void** extra) { counts[F_cuLaunchKernel]++; return 0; }
CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* addr, const uint64_t* dims,
                                const uint64_t* strides, const uint32_t* box, const uint32_t* estrides,
                                int interleave, int swizzle, int l2, int oob) {
  counts[F_cuTensorMapEncodeTiled]++; memset(map, 0, 128); memcpy(map, &addr, sizeof(addr)); return 0;
}

static void* table[F_N] = { (void*)cuInit, (void*)cuDriverGetVersion, (void*)cuGetErrorName,
  (void*)cuGetErrorString, (void*)cuDeviceGet, (void*)cuDeviceGetCount, (void*)cuDeviceGetName,
  (void*)cuDeviceGetAttribute, (void*)cuDevicePrimaryCtxRetain, (void*)cuCtxGetCurrent,
  (void*)cuCtxPushCurrent, (void*)cuCtxPopCurrent, (void*)cuCtxSetCurrent, (void*)cuCtxGetDevice,
  (void*)cuStreamGetCtx, (void*)cuStreamIsCapturing, (void*)cuModuleLoadData, (void*)cuModuleGetFunction,
  (void*)cuFuncSetAttribute, (void*)cuMemAllocAsync, (void*)cuMemFreeAsync, (void*)cuMemAlloc_v2,
  (void*)cuMemFree_v2, (void*)cuStreamSynchronize, (void*)cuThreadExchangeStreamCaptureMode, (void*)cuMemsetD32Async,
  (void*)cuMemsetD8Async, (void*)cuLaunchKernelEx, (void*)cuLaunchKernel, (void*)cuTensorMapEncodeTiled };

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* status) {
  for (int i = 0; i < F_N; i++) if (strcmp(symbol, names[i]) == 0) { *pfn = table[i]; if (status) *status = 0; return 0; }
  *pfn = NULL; if (status) *status = 1; return 500; /* CUDA_ERROR_NOT_FOUND */
}
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* for the harness (ctypes) */
int fakecuda_n(void) { return F_N; }
const char* fakecuda_name(int i) { return names[i]; }
unsigned long long fakecuda_count(int i) { return counts[i]; }
void fakecuda_reset(void) { memset(counts, 0, sizeof counts); }
