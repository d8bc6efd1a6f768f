// A launch plan's repeat in C++: find the plan recorded for a call's scalars and tensor
// metadata (a site: one public op's native plans), allocate the outputs, read the tensors'
// addresses into the compiled Triton kernel's parameter block and launch it through the driver
// (cuLaunchKernel), with no Python between the call and the launch. Built by _native.py.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
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

// Pointer parameter k is the address of tensor sources[k] of (*args, *outputs) plus shifts[k]
// bytes; it was compiled for a 16-byte aligned address iff aligned[k]. A plan of no outputs
// writes into its arguments and returns args[like].
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
  std::vector<int64_t> shifts;
  std::vector<char> aligned;
  std::vector<unsigned char> block_bytes;  // constants packed, pointers left zero
  // The outputs' layout as the first call's empty_like made it: calls whose args[like] has
  // the layout it had then allocate the same way without the dispatcher (0.5-0.7 us less each).
  struct Layout {
    bool known = false;
    std::vector<int64_t> like_sizes, like_strides, sizes, strides;
    c10::Device device{c10::kCPU};
    c10::Allocator* allocator = nullptr;
    c10::DispatchKeySet keys;
    at::ScalarType dtype = at::ScalarType::Undefined;
  };
  mutable Layout out;
};

const char* kCapsule = "paper_repro.native_plan";

void destroy(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// make(function, grid, num_warps, shared, device, n_args, like, dtype, n_outputs,
//      params, offsets, pointer_params, sources, aligned[, shifts]) -> capsule
PyObject* make(PyObject*, PyObject* args) {
  unsigned long long function;
  unsigned gx, gy, gz, warps, shared;
  int device, n_outputs;
  Py_ssize_t n_args, like;
  PyObject *dtype, *offsets, *pointer_params, *sources, *aligned, *shifts = Py_None;
  const char* bytes;
  Py_ssize_t n_bytes;
  if (!PyArg_ParseTuple(args, "K(III)IIinnOiy#OOOO|O", &function, &gx, &gy, &gz, &warps,
                        &shared, &device, &n_args, &like, &dtype, &n_outputs, &bytes, &n_bytes,
                        &offsets, &pointer_params, &sources, &aligned, &shifts))
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
  if (n_outputs < 0 || n_outputs > kMaxOutputs || like < 0 || like >= n_args ||
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
      !ints(sources, plan->sources) || !ints(aligned, plan->aligned) ||
      (shifts != Py_None && !ints(shifts, plan->shifts)))
    return nullptr;
  if (shifts == Py_None) plan->shifts.assign(plan->sources.size(), 0);
  size_t n_params = plan->offsets.size();
  bool ok = n_params <= kMaxParams && plan->pointer_params.size() == plan->sources.size() &&
            plan->sources.size() == plan->aligned.size() &&
            plan->sources.size() == plan->shifts.size();
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

// The plan's outputs, each ``empty_like(like, plan's dtype)``: through the dispatcher the first
// time (and for another layout of ``like``), then as the dispatcher's empty did.
void allocate(const Plan& plan, const at::Tensor& like, at::Tensor* outs) {
  Plan::Layout& out = plan.out;
  if (out.known && like.device() == out.device && like.sizes().equals(out.like_sizes) &&
      like.strides().equals(out.like_strides)) {
    for (int j = 0; j < plan.n_outputs; ++j)
      outs[j] = at::detail::empty_strided_generic(out.sizes, out.strides, out.allocator,
                                                  out.keys, out.dtype);
    return;
  }
  outs[0] = plan.cast ? at::empty_like(like, like.options().dtype(plan.dtype))
                      : at::empty_like(like);
  for (int j = 1; j < plan.n_outputs; ++j) outs[j] = at::empty_like(outs[0]);
  const at::Tensor& first = outs[0];
  if (first.layout() != c10::kStrided || like.layout() != c10::kStrided) return;
  out.like_sizes = like.sizes().vec(), out.like_strides = like.strides().vec();
  out.sizes = first.sizes().vec(), out.strides = first.strides().vec();
  out.device = first.device(), out.dtype = first.scalar_type();
  out.allocator = c10::GetAllocator(out.device.type());
  out.keys = c10::DispatchKeySet(
      c10::computeDispatchKey(out.dtype, c10::kStrided, out.device));
  out.known = out.allocator != nullptr;
}

// The outputs, and the parameter block with every tensor's address in place; false where an
// address's 16-byte alignment differs from the compiled kernel's (the caller falls back).
bool prepare(const Plan& plan, PyObject* args, at::Tensor* outs, unsigned char* block) {
  if (plan.n_outputs > 0)
    allocate(plan, THPVariable_Unpack(PyTuple_GET_ITEM(args, plan.like)), outs);
  std::memcpy(block, plan.block_bytes.data(), plan.block_bytes.size());
  for (size_t k = 0; k < plan.sources.size(); ++k) {
    Py_ssize_t s = plan.sources[k];
    const at::Tensor& t = s < plan.n_args ? THPVariable_Unpack(PyTuple_GET_ITEM(args, s))
                                          : outs[s - plan.n_args];
    auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr()) + plan.shifts[k];
    if (((address & 15) == 0) != static_cast<bool>(plan.aligned[k])) return false;
    std::memcpy(block + plan.offsets[plan.pointer_params[k]], &address, sizeof(address));
  }
  return true;
}

PyObject* result(const Plan& plan, PyObject* args, at::Tensor* outs) {
  if (plan.n_outputs == 0) {
    PyObject* written = PyTuple_GET_ITEM(args, plan.like);
    Py_INCREF(written);
    return written;
  }
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

// The plan's outputs, launched on ``stream``; None where the plan does not apply (another
// device or context, no context yet on this thread, another pointer alignment).
PyObject* launch(const Plan& plan, PyObject* args, long device, void* stream) {
  Driver& d = driver();
  CUcontext context = nullptr;
  int context_device = -1;
  if (device != plan.device || !d.ready() || d.current(&context) != 0 || context == nullptr ||
      d.device(&context_device) != 0 || context_device != plan.device)
    Py_RETURN_NONE;
  at::Tensor outs[kMaxOutputs];
  alignas(16) unsigned char block[kMaxBytes];
  void* params[kMaxParams];
  try {
    if (!prepare(plan, args, outs, block)) Py_RETURN_NONE;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  for (size_t i = 0; i < plan.offsets.size(); ++i) params[i] = block + plan.offsets[i];
  CUresult status = d.launch(plan.function, plan.grid[0], plan.grid[1], plan.grid[2],
                             plan.block, 1, 1, plan.shared, stream, params, nullptr);
  if (status != 0) {
    const char* name = nullptr;
    d.error(status, &name);
    PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: %s (%d)", name ? name : "?",
                 status);
    return nullptr;
  }
  return result(plan, args, outs);
}

// run(plan, args, device, stream) -> outputs, or None where the plan does not apply.
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
  return launch(*plan, argv[1], device, stream);
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
  PyObject* out = result(*plan, tensors, outs);
  if (out == nullptr) return nullptr;
  if (!fits) return Py_BuildValue("(NO)", out, Py_None);
  return Py_BuildValue("(Ny#)", out, reinterpret_cast<const char*>(block),
                       static_cast<Py_ssize_t>(plan->block_bytes.size()));
}

// ---- Sites: one public op's native plans, each found by its call's scalars and metadata ----

// What a plan's tensor argument must repeat: torch's tensor guard's checks (exact type, shape,
// strides, dtype, device, requires_grad, dispatch keys under the thread's included/excluded).
struct Meta {
  bool present = false;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::ScalarType::Undefined;
  c10::Device device{c10::kCPU};
  bool requires_grad = false;
  uint64_t keys = 0;
};

uint64_t dispatch_keys(const at::Tensor& t) {
  c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  return ((t.key_set() | local.included_) - local.excluded_).raw_repr();
}

bool same_meta(const Meta& m, PyObject* obj) {
  if (!m.present) return obj == Py_None;
  if (!THPVariable_CheckExact(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  return t.dim() == static_cast<int64_t>(m.sizes.size()) && t.scalar_type() == m.dtype &&
         t.device() == m.device && t.requires_grad() == m.requires_grad &&
         t.sizes().equals(m.sizes) && t.strides().equals(m.strides) &&
         dispatch_keys(t) == m.keys;
}

// Scalars repeat when each has the recorded exact type and compares equal (as the Python
// plans' key: True == 1.0 but their types differ).
bool same_scalars(PyObject* recorded, PyObject* scalars) {
  Py_ssize_t n = PyTuple_GET_SIZE(recorded);
  if (!PyTuple_Check(scalars) || PyTuple_GET_SIZE(scalars) != n) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *a = PyTuple_GET_ITEM(recorded, i), *b = PyTuple_GET_ITEM(scalars, i);
    if (a == b) continue;
    if (Py_TYPE(a) != Py_TYPE(b)) return false;
    if (PyFloat_CheckExact(a)) {
      if (PyFloat_AS_DOUBLE(a) != PyFloat_AS_DOUBLE(b)) return false;
      continue;
    }
    int equal = PyObject_RichCompareBool(a, b, Py_EQ);
    if (equal < 0) PyErr_Clear();
    if (equal != 1) return false;
  }
  return true;
}

struct Entry {
  PyObject* scalars = nullptr;  // the recorded call's scalars (a tuple)
  PyObject* owner = nullptr;    // the Python plan: keeps the compiled kernel loaded
  PyObject* capsule = nullptr;  // the native plan
  std::vector<Meta> args;
  std::vector<Py_ssize_t> words;  // arguments read as 64-bit words: 8-byte aligned
  bool grad = false;              // an argument requires grad: not under grad mode
  ~Entry() {
    Py_XDECREF(scalars);
    Py_XDECREF(owner);
    Py_XDECREF(capsule);
  }
  bool matches(PyObject* call_args, PyObject* call_scalars) const {
    if (PyTuple_GET_SIZE(call_args) != static_cast<Py_ssize_t>(args.size()) ||
        !same_scalars(scalars, call_scalars))
      return false;
    for (size_t i = 0; i < args.size(); ++i)
      if (!same_meta(args[i], PyTuple_GET_ITEM(call_args, i))) return false;
    for (Py_ssize_t i : words) {
      auto address = reinterpret_cast<std::uintptr_t>(
          THPVariable_Unpack(PyTuple_GET_ITEM(call_args, i)).data_ptr());
      if (address % 8 != 0) return false;
    }
    return !(grad && c10::GradMode::is_enabled());
  }
};

struct Site {
  std::vector<std::unique_ptr<Entry>> entries;  // newest or last found first
  size_t capacity = 16;
};

const char* kSiteCapsule = "paper_repro.native_site";

// Set once by configure(): where plans are off (lists whose item is not None: forced tiles or
// prefetch), Triton's launch hooks, torch's current device and raw stream.
struct Config {
  PyObject* overrides = nullptr;  // tuple of one-item lists
  PyObject* hooks = nullptr;      // Triton's runtime knobs (launch_enter/exit_hook), or None
  PyObject* device = nullptr;     // () -> int
  PyObject* stream = nullptr;     // (int) -> int
} config;

void destroy_site(PyObject* capsule) {
  delete static_cast<Site*>(PyCapsule_GetPointer(capsule, kSiteCapsule));
}

Site* unpack_site(PyObject* capsule) {
  return static_cast<Site*>(PyCapsule_GetPointer(capsule, kSiteCapsule));
}

// The entry matching the call, moved to the front; null on a miss (with no error set).
Entry* find(Site& site, PyObject* args, PyObject* scalars) {
  if (!PyTuple_Check(args)) return nullptr;
  for (size_t i = 0; i < site.entries.size(); ++i) {
    bool hit;
    try {
      hit = site.entries[i]->matches(args, scalars);
    } catch (const std::exception&) {  // e.g. symbolic sizes: the Python path decides
      hit = false;
    }
    if (!hit) continue;
    if (i > 0) std::rotate(site.entries.begin(), site.entries.begin() + i,
                           site.entries.begin() + i + 1);
    return site.entries[0].get();
  }
  return nullptr;
}

bool overridden() {
  if (config.overrides == nullptr) return true;  // not configured: never serve
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(config.overrides); ++i)
    if (PyList_GET_ITEM(PyTuple_GET_ITEM(config.overrides, i), 0) != Py_None) return true;
  return false;
}

// A new reference, released at the end of the scope.
struct Owned {
  PyObject* object;
  explicit Owned(PyObject* o) : object(o) { Py_INCREF(o); }
  ~Owned() { Py_DECREF(object); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
};

// Whether a Triton launch hook is set (profilers): -1 on error.
int hooked() {
  if (config.hooks == Py_None) return 0;
  Owned hooks(config.hooks);  // a getattr may run code that reconfigures
  for (const char* name : {"launch_enter_hook", "launch_exit_hook"}) {
    PyObject* hook = PyObject_GetAttrString(hooks.object, name);
    if (hook == nullptr) return -1;
    int active = 0;
    if (hook != Py_None) {
      PyObject* calls = PyObject_GetAttrString(hook, "calls");
      if (calls == nullptr) {
        PyErr_Clear();
        active = 1;  // a plain callable
      } else {
        active = PyObject_IsTrue(calls);
        Py_DECREF(calls);
      }
    }
    Py_DECREF(hook);
    if (active != 0) return active;
  }
  return 0;
}

// configure(overrides, hooks, device, stream) -> None
PyObject* configure(PyObject*, PyObject* args) {
  PyObject *overrides, *hooks, *device, *stream;
  if (!PyArg_ParseTuple(args, "O!OOO", &PyTuple_Type, &overrides, &hooks, &device, &stream))
    return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(overrides); ++i) {
    PyObject* item = PyTuple_GET_ITEM(overrides, i);
    if (!PyList_Check(item) || PyList_GET_SIZE(item) != 1) {
      PyErr_SetString(PyExc_TypeError, "overrides must be one-item lists");
      return nullptr;
    }
  }
  if (!PyCallable_Check(device) || !PyCallable_Check(stream)) {
    PyErr_SetString(PyExc_TypeError, "device and stream must be callables");
    return nullptr;
  }
  for (PyObject* o : {overrides, hooks, device, stream}) Py_INCREF(o);
  Py_XDECREF(config.overrides);
  Py_XDECREF(config.hooks);
  Py_XDECREF(config.device);
  Py_XDECREF(config.stream);
  config = Config{overrides, hooks, device, stream};
  Py_RETURN_NONE;
}

// site(capacity) -> an empty site
PyObject* site(PyObject*, PyObject* args) {
  Py_ssize_t capacity;
  if (!PyArg_ParseTuple(args, "n", &capacity)) return nullptr;
  if (capacity < 1) {
    PyErr_SetString(PyExc_ValueError, "capacity must be positive");
    return nullptr;
  }
  auto s = std::make_unique<Site>();
  s->capacity = static_cast<size_t>(capacity);
  return PyCapsule_New(s.release(), kSiteCapsule, destroy_site);
}

// add(site, args, scalars, grad, words, owner, plan) -> None: ``plan`` serves later calls whose
// scalars and tensor metadata are those of this call; the oldest entry beyond capacity goes.
PyObject* add(PyObject*, PyObject* args) {
  PyObject *capsule, *call_args, *scalars, *words, *owner, *plan_capsule;
  int grad;
  if (!PyArg_ParseTuple(args, "OO!O!pOOO", &capsule, &PyTuple_Type, &call_args, &PyTuple_Type,
                        &scalars, &grad, &words, &owner, &plan_capsule))
    return nullptr;
  Site* s = unpack_site(capsule);
  auto* plan = static_cast<Plan*>(PyCapsule_GetPointer(plan_capsule, kCapsule));
  if (s == nullptr || plan == nullptr) return nullptr;
  if (PyTuple_GET_SIZE(call_args) != plan->n_args) {
    PyErr_SetString(PyExc_ValueError, "args must be the plan's tuple of arguments");
    return nullptr;
  }
  auto entry = std::make_unique<Entry>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(call_args); ++i) {
    PyObject* obj = PyTuple_GET_ITEM(call_args, i);
    Meta m;
    if (obj != Py_None) {
      if (!THPVariable_CheckExact(obj)) {
        PyErr_Format(PyExc_TypeError, "argument %zd is neither None nor a plain tensor", i);
        return nullptr;
      }
      const at::Tensor& t = THPVariable_Unpack(obj);
      m.present = true;
      m.sizes = t.sizes().vec();
      m.strides = t.strides().vec();
      m.dtype = t.scalar_type(), m.device = t.device(), m.requires_grad = t.requires_grad();
      m.keys = dispatch_keys(t);
    }
    entry->args.push_back(std::move(m));
  }
  PyObject* fast = PySequence_Fast(words, "words must be a sequence of argument indices");
  if (fast == nullptr) return nullptr;
  for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(fast); ++k) {
    Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, k));
    if (i == -1 && PyErr_Occurred()) break;
    if (i < 0 || i >= plan->n_args || !entry->args[i].present) {
      PyErr_Format(PyExc_ValueError, "words: %zd is not a present argument", i);
      break;
    }
    entry->words.push_back(i);
  }
  Py_DECREF(fast);
  if (PyErr_Occurred()) return nullptr;
  for (PyObject* o : {scalars, owner, plan_capsule}) Py_INCREF(o);
  entry->scalars = scalars, entry->owner = owner, entry->capsule = plan_capsule;
  entry->grad = grad;
  s->entries.insert(s->entries.begin(), std::move(entry));
  if (s->entries.size() > s->capacity) s->entries.pop_back();
  Py_RETURN_NONE;
}

// lookup(site, args, scalars) -> the owner of the entry this call would use, or None.
PyObject* lookup(PyObject*, PyObject* args) {
  PyObject *capsule, *call_args, *scalars;
  if (!PyArg_ParseTuple(args, "OOO", &capsule, &call_args, &scalars)) return nullptr;
  Site* s = unpack_site(capsule);
  if (s == nullptr) return nullptr;
  Entry* e = overridden() ? nullptr : find(*s, call_args, scalars);
  if (e == nullptr) Py_RETURN_NONE;
  Py_INCREF(e->owner);
  return e->owner;
}

// serve(site, args, scalars) -> outputs of the plan recorded for this call, or None (no plan,
// overrides or hooks set, or the plan declined): the whole repeat of a public call.
PyObject* serve(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 3) {
    PyErr_SetString(PyExc_TypeError, "serve(site, args, scalars)");
    return nullptr;
  }
  Site* s = unpack_site(argv[0]);
  if (s == nullptr) return nullptr;
  if (overridden()) Py_RETURN_NONE;
  Entry* e = find(*s, argv[1], argv[2]);
  if (e == nullptr) Py_RETURN_NONE;
  // What follows may run Python, and another thread may then change the site: hold the plan.
  Owned held(e->capsule);
  int hooks = hooked();
  if (hooks != 0) {
    if (hooks < 0) return nullptr;
    Py_RETURN_NONE;
  }
  PyObject* device = PyObject_CallNoArgs(config.device);
  if (device == nullptr) return nullptr;
  long index = PyLong_AsLong(device);
  PyObject* stream = index == -1 && PyErr_Occurred() ? nullptr
                                                     : PyObject_CallOneArg(config.stream, device);
  Py_DECREF(device);
  if (stream == nullptr) return nullptr;
  void* raw = PyLong_AsVoidPtr(stream);
  Py_DECREF(stream);
  if (PyErr_Occurred()) return nullptr;
  return launch(*static_cast<Plan*>(PyCapsule_GetPointer(held.object, kCapsule)), argv[1],
                index, raw);
}

PyObject* size(PyObject*, PyObject* capsule) {
  Site* s = unpack_site(capsule);
  return s == nullptr ? nullptr : PyLong_FromSize_t(s->entries.size());
}

PyObject* has_driver(PyObject*, PyObject*) { return PyBool_FromLong(driver().ready()); }

PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "make(...) -> plan capsule"},
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(plan, args, device, stream) -> outputs or None"},
    {"packed", packed, METH_VARARGS, "packed(plan, args) -> (outputs, parameter bytes)"},
    {"configure", configure, METH_VARARGS,
     "configure(overrides, hooks, device, stream): what serve() checks on every call"},
    {"site", site, METH_VARARGS, "site(capacity) -> an empty site"},
    {"add", add, METH_VARARGS, "add(site, args, scalars, grad, words, owner, plan)"},
    {"lookup", lookup, METH_VARARGS, "lookup(site, args, scalars) -> owner or None"},
    {"serve", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(serve)), METH_FASTCALL,
     "serve(site, args, scalars) -> outputs or None"},
    {"size", size, METH_O, "size(site) -> entries held"},
    {"has_driver", has_driver, METH_NOARGS, "whether libcuda's launch entry points were found"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "paper_repro_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_paper_repro_native() { return PyModule_Create(&module); }
