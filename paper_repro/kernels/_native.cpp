// A launch plan's repeat in C++: allocate the outputs, read the tensors' addresses into the
// compiled Triton kernel's parameter block and launch it through the driver (cuLaunchKernel),
// with no Python between the call and the launch. Built and loaded by _native.py.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using CUresult = int;
using CUfunction = void*;
using CUstream = void*;
using CUcontext = void*;
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
using CurrentFn = CUresult (*)(CUcontext*);
using DeviceFn = CUresult (*)(int*);
using ErrorFn = CUresult (*)(CUresult, const char**);

constexpr size_t kMaxParams = 64;
constexpr size_t kMaxBytes = 8 * kMaxParams;
constexpr int kMaxOutputs = 4;

// The driver's entry points, found in the libcuda.so.1 that torch has already loaded (null
// on a machine without one: plans are then built but never launched).
struct Driver {
  LaunchFn launch = nullptr;
  CurrentFn current = nullptr;
  DeviceFn device = nullptr;
  ErrorFn error = nullptr;
  Driver() {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) return;
    launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
    current = reinterpret_cast<CurrentFn>(dlsym(lib, "cuCtxGetCurrent"));
    device = reinterpret_cast<DeviceFn>(dlsym(lib, "cuCtxGetDevice"));
    error = reinterpret_cast<ErrorFn>(dlsym(lib, "cuGetErrorString"));
  }
  bool ready() const { return launch && current && device && error; }
};

Driver& driver() {
  static Driver d;
  return d;
}

// Pointer parameter k is the address of tensor sources[k] of (*args, *outputs); it was
// compiled for a 16-byte aligned address iff aligned[k].
struct Plan {
  CUfunction function;
  unsigned grid[3];
  unsigned block, shared;
  int device;
  Py_ssize_t n_args, like;
  int n_outputs;
  bool cast;
  at::ScalarType dtype;
  std::vector<size_t> offsets;  // every parameter's place in the block
  std::vector<size_t> pointer_params;
  std::vector<Py_ssize_t> sources;
  std::vector<char> aligned;
  std::vector<unsigned char> block_bytes;  // constants packed, pointers left zero
};

const char* kCapsule = "paper_repro.native_plan";

void destroy(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// make(function, grid, num_warps, shared, device, n_args, like, dtype, n_outputs,
//      params, offsets, pointer_params, sources, aligned) -> capsule
PyObject* make(PyObject*, PyObject* args) {
  unsigned long long function;
  unsigned gx, gy, gz, warps, shared;
  int device, n_outputs;
  Py_ssize_t n_args, like;
  PyObject *dtype, *offsets, *pointer_params, *sources, *aligned;
  const char* bytes;
  Py_ssize_t n_bytes;
  if (!PyArg_ParseTuple(args, "K(III)IIinnOiy#OOOO", &function, &gx, &gy, &gz, &warps, &shared,
                        &device, &n_args, &like, &dtype, &n_outputs, &bytes, &n_bytes,
                        &offsets, &pointer_params, &sources, &aligned))
    return nullptr;
  auto plan = std::make_unique<Plan>();
  plan->function = reinterpret_cast<CUfunction>(function);
  plan->grid[0] = gx, plan->grid[1] = gy, plan->grid[2] = gz;
  plan->block = 32 * warps, plan->shared = shared, plan->device = device;
  plan->n_args = n_args, plan->like = like, plan->n_outputs = n_outputs;
  plan->cast = dtype != Py_None;
  if (plan->cast) {
    if (!THPDtype_Check(dtype)) {
      PyErr_SetString(PyExc_TypeError, "dtype must be a torch.dtype or None");
      return nullptr;
    }
    plan->dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  }
  if (n_outputs < 1 || n_outputs > kMaxOutputs || like < 0 || like >= n_args ||
      n_bytes > static_cast<Py_ssize_t>(kMaxBytes)) {
    PyErr_SetString(PyExc_ValueError, "plan out of the native path's bounds");
    return nullptr;
  }
  plan->block_bytes.assign(bytes, bytes + n_bytes);
  auto ints = [](PyObject* seq, auto& out) {
    PyObject* fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (fast == nullptr) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i) {
      long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
      if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(fast);
        return false;
      }
      out.push_back(static_cast<typename std::decay_t<decltype(out)>::value_type>(v));
    }
    Py_DECREF(fast);
    return true;
  };
  if (!ints(offsets, plan->offsets) || !ints(pointer_params, plan->pointer_params) ||
      !ints(sources, plan->sources) || !ints(aligned, plan->aligned))
    return nullptr;
  size_t n_params = plan->offsets.size();
  bool ok = n_params <= kMaxParams && plan->pointer_params.size() == plan->sources.size() &&
            plan->sources.size() == plan->aligned.size();
  for (size_t k = 0; ok && k < plan->sources.size(); ++k)
    ok = plan->pointer_params[k] < n_params && plan->sources[k] >= 0 &&
         plan->sources[k] < n_args + n_outputs &&
         plan->offsets[plan->pointer_params[k]] + 8 <= plan->block_bytes.size();
  for (size_t i = 0; ok && i < n_params; ++i) ok = plan->offsets[i] < plan->block_bytes.size();
  if (!ok) {
    PyErr_SetString(PyExc_ValueError, "inconsistent native plan layout");
    return nullptr;
  }
  return PyCapsule_New(plan.release(), kCapsule, destroy);
}

// The outputs, and the parameter block with every tensor's address in place; false where an
// address's 16-byte alignment differs from the compiled kernel's (the caller falls back).
bool prepare(const Plan& plan, PyObject* args, at::Tensor* outs, unsigned char* block) {
  const at::Tensor& like = THPVariable_Unpack(PyTuple_GET_ITEM(args, plan.like));
  outs[0] = plan.cast ? at::empty_like(like, like.options().dtype(plan.dtype))
                      : at::empty_like(like);
  for (int j = 1; j < plan.n_outputs; ++j) outs[j] = at::empty_like(outs[0]);
  std::memcpy(block, plan.block_bytes.data(), plan.block_bytes.size());
  for (size_t k = 0; k < plan.sources.size(); ++k) {
    Py_ssize_t s = plan.sources[k];
    const at::Tensor& t = s < plan.n_args ? THPVariable_Unpack(PyTuple_GET_ITEM(args, s))
                                          : outs[s - plan.n_args];
    auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    if (((address & 15) == 0) != static_cast<bool>(plan.aligned[k])) return false;
    std::memcpy(block + plan.offsets[plan.pointer_params[k]], &address, sizeof(address));
  }
  return true;
}

PyObject* result(const Plan& plan, at::Tensor* outs) {
  if (plan.n_outputs == 1) return THPVariable_Wrap(std::move(outs[0]));
  PyObject* tuple = PyTuple_New(plan.n_outputs);
  if (tuple == nullptr) return nullptr;
  for (int j = 0; j < plan.n_outputs; ++j) {
    PyObject* item = THPVariable_Wrap(std::move(outs[j]));
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, j, item);
  }
  return tuple;
}

Plan* unpack(PyObject* capsule, PyObject* args) {
  auto* plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (plan != nullptr && (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != plan->n_args)) {
    PyErr_SetString(PyExc_TypeError, "args must be the plan's tuple of arguments");
    return nullptr;
  }
  return plan;
}

// run(plan, args, device, stream) -> outputs, or None where the plan does not apply (another
// device or context, no context yet on this thread, another pointer alignment).
PyObject* run(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 4) {
    PyErr_SetString(PyExc_TypeError, "run(plan, args, device, stream)");
    return nullptr;
  }
  Plan* plan = unpack(argv[0], argv[1]);
  if (plan == nullptr) return nullptr;
  long device = PyLong_AsLong(argv[2]);
  void* stream = PyLong_AsVoidPtr(argv[3]);
  if (PyErr_Occurred()) return nullptr;
  Driver& d = driver();
  CUcontext context = nullptr;
  int context_device = -1;
  if (device != plan->device || !d.ready() || d.current(&context) != 0 || context == nullptr ||
      d.device(&context_device) != 0 || context_device != plan->device)
    Py_RETURN_NONE;
  at::Tensor outs[kMaxOutputs];
  alignas(16) unsigned char block[kMaxBytes];
  void* params[kMaxParams];
  try {
    if (!prepare(*plan, argv[1], outs, block)) Py_RETURN_NONE;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  for (size_t i = 0; i < plan->offsets.size(); ++i) params[i] = block + plan->offsets[i];
  CUresult status = d.launch(plan->function, plan->grid[0], plan->grid[1], plan->grid[2],
                             plan->block, 1, 1, plan->shared, stream, params, nullptr);
  if (status != 0) {
    const char* name = nullptr;
    d.error(status, &name);
    PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: %s (%d)", name ? name : "?",
                 status);
    return nullptr;
  }
  return result(*plan, outs);
}

// packed(plan, args) -> (outputs, parameter block as bytes or None): ``run`` without the launch.
PyObject* packed(PyObject*, PyObject* args) {
  PyObject *capsule, *tensors;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &tensors)) return nullptr;
  Plan* plan = unpack(capsule, tensors);
  if (plan == nullptr) return nullptr;
  at::Tensor outs[kMaxOutputs];
  alignas(16) unsigned char block[kMaxBytes];
  bool fits;
  try {
    fits = prepare(*plan, tensors, outs, block);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  PyObject* out = result(*plan, outs);
  if (out == nullptr) return nullptr;
  if (!fits) return Py_BuildValue("(NO)", out, Py_None);
  return Py_BuildValue("(Ny#)", out, reinterpret_cast<const char*>(block),
                       static_cast<Py_ssize_t>(plan->block_bytes.size()));
}

PyObject* has_driver(PyObject*, PyObject*) { return PyBool_FromLong(driver().ready()); }

PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "make(...) -> plan capsule"},
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(plan, args, device, stream) -> outputs or None"},
    {"packed", packed, METH_VARARGS, "packed(plan, args) -> (outputs, parameter bytes)"},
    {"has_driver", has_driver, METH_NOARGS, "whether libcuda's launch entry points were found"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "paper_repro_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_paper_repro_native() { return PyModule_Create(&module); }
