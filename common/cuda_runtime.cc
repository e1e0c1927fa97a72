#include "common/cuda_runtime.h"

#include <dlfcn.h>

#include <initializer_list>

namespace kvtier::common {
namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

const CudaRuntime* Load() {
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "/usr/local/cuda/lib64/libcudart.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return nullptr;
  static CudaRuntime rt;
  int (*get_device_count)(int*) = nullptr;
  int devices = 0;
  if (Resolve(lib, "cudaGetDeviceCount", &get_device_count) &&
      Resolve(lib, "cudaHostAlloc", &rt.host_alloc) &&
      Resolve(lib, "cudaFreeHost", &rt.free_host) &&
      Resolve(lib, "cudaHostRegister", &rt.host_register) &&
      Resolve(lib, "cudaHostUnregister", &rt.host_unregister) &&
      Resolve(lib, "cudaHostGetFlags", &rt.host_get_flags) &&
      Resolve(lib, "cudaMalloc", &rt.malloc) && Resolve(lib, "cudaFree", &rt.free) &&
      Resolve(lib, "cudaMemcpy", &rt.memcpy) && get_device_count(&devices) == 0 &&
      devices > 0) {
    return &rt;
  }
  dlclose(lib);
  return nullptr;
}

}  // namespace

const CudaRuntime* LoadCudaRuntime() {
  static const CudaRuntime* const rt = Load();
  return rt;
}

}  // namespace kvtier::common
