#include "runtime.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>

#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_path.hpp"
#include "store.hpp"
#include "work.hpp"

namespace zipccl {

const char* const kForkedMessage =
    "zipccl: this process was forked from one that had loaded zipccl; the Go "
    "runtime cannot be used in a forked child. Use the 'spawn' start method.";

namespace {

std::atomic<bool> gForked{false};
std::atomic<bool> gExiting{false};
std::atomic<uint64_t> gNextTicket{1};

// Completions in progress. Completing a work may take the GIL (Python
// .then() callbacks; freeing a tensor whose PyObject C++ keeps alive). A
// thread that asks for the GIL once Python is finalizing is ended with
// pthread_exit, whose forced unwinding through a noexcept destructor calls
// std::terminate: the process aborts at exit. So markExiting() (Python's
// atexit, which runs before finalization) sets gExiting and waits for the
// completions in progress (beginCompletion/endCompletion), and later ones
// are leaked instead.
std::mutex gCompletionMu;
std::condition_variable gCompletionCv;
int gCompleting = 0; // guarded by gCompletionMu

// False once exiting: the caller must then leak what it would complete.
bool beginCompletion() {
  std::lock_guard<std::mutex> lock(gCompletionMu);
  if (gExiting.load()) {
    return false;
  }
  ++gCompleting;
  return true;
}

void endCompletion() {
  {
    std::lock_guard<std::mutex> lock(gCompletionMu);
    --gCompleting;
  }
  gCompletionCv.notify_all();
}

// Written once under gLoadMu, then only read; gApiReady publishes it.
Api gApi{};
std::atomic<bool> gApiReady{false};
std::mutex gLoadMu;
std::string gLoadedPath;

// The in-flight works by ticket. Heap-allocated and never freed: the
// detached pollers may still use it while the process exits.
struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, c10::intrusive_ptr<ZipcclWork>> works;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

c10::intrusive_ptr<ZipcclWork> take(uint64_t ticket) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.works.find(ticket);
  if (it == r.works.end()) {
    return {};
  }
  auto work = std::move(it->second);
  r.works.erase(it);
  return work;
}

// Leaks works (never completes them) once the interpreter exits; see
// gCompletionMu.
void abandonAtExit(std::unordered_map<uint64_t, c10::intrusive_ptr<ZipcclWork>>& works) {
  for (auto& [ticket, work] : works) {
    (void)ticket;
    (void)work.release();
  }
  works.clear();
}

void failAll(const std::string& message) {
  std::unordered_map<uint64_t, c10::intrusive_ptr<ZipcclWork>> works;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    works.swap(r.works);
  }
  if (!beginCompletion()) {
    abandonAtExit(works);
    return;
  }
  for (auto& [ticket, work] : works) {
    (void)ticket;
    work->partDone(ZC_ERR_CLOSED, -1, message.c_str());
  }
  works.clear(); // the last references may go here, before endCompletion
  endCompletion();
}

void onForkChild() {
  gForked.store(true);
}

void onExit() {
  gExiting.store(true);
}

// Pollers: threads that pull completions from Go and finish the works on
// C++ threads, so torch futures (and the Python callbacks chained on them)
// never run on a Go thread. One polls at a time, so works complete in the
// engine's order. A callback may block its thread, waiting for another of
// zipccl's works (torch's PowerSGD hook waits inside a callback): then the
// work it waits for, and every error or timeout after it, must complete on
// another thread. The watchdog starts a poller when every poller has been
// busy for kStuckAfter; a poller that finishes while another is idle ends.
std::atomic<int> gIdlePollers{0};
std::atomic<int64_t> gLastBusyNs{0}; // when a poller last took, or was started for, a completion
constexpr std::chrono::milliseconds kStuckAfter{100};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Counted in gIdlePollers by whoever starts it.
void pollerLoop() {
  c10::AutoGradMode noGrad(false);
  auto completion = std::make_unique<zc_completion>();
  for (;;) {
    std::memset(completion.get(), 0, sizeof(zc_completion));
    int32_t got = gApi.poll(1000, completion.get());
    if (got == 0) {
      continue;
    }
    completion->message[sizeof(completion->message) - 1] = '\0';
    if (got != 1 ||
        (completion->ticket == 0 && completion->status == ZC_ERR_CLOSED)) {
      // The engine shut down: nothing in flight will complete any more.
      failAll(
          completion->message[0] != '\0'
              ? std::string(completion->message)
              : "zipccl: the engine shut down (zc_poll returned " +
                  std::to_string(got) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    auto work = take(completion->ticket);
    if (!work) {
      continue; // not ours (already failed, or a stray ticket)
    }
    if (!beginCompletion()) {
      (void)work.release(); // leaked: see gCompletionMu
      continue;
    }
    gIdlePollers.fetch_sub(1);
    gLastBusyNs.store(nowNs());
    try {
      work->partDone(
          completion->status, completion->source, completion->message);
    } catch (const std::exception& e) {
      TORCH_WARN("zipccl: completing ticket ", completion->ticket, ": ", e.what());
    }
    work.reset(); // possibly the last reference: dropped before endCompletion
    endCompletion();
    if (gIdlePollers.load() > 0) {
      return; // another poller took over while this one was busy
    }
    gIdlePollers.fetch_add(1);
  }
}

void watchdogLoop() {
  for (;;) {
    std::this_thread::sleep_for(kStuckAfter / 2);
    const int64_t now = nowNs();
    if (gIdlePollers.load() == 0 &&
        now - gLastBusyNs.load() >
            std::chrono::duration_cast<std::chrono::nanoseconds>(kStuckAfter).count()) {
      gLastBusyNs.store(now); // one new poller per kStuckAfter at most
      gIdlePollers.fetch_add(1);
      std::thread(&pollerLoop).detach();
    }
  }
}

// The global undefined symbols of the ELF shared object at path that
// nothing in the process or in lib's dependencies defines, NVML's excepted
// (go-nvml binds those itself). Empty when the file cannot be parsed.
std::vector<std::string> unresolvedSymbols(const std::string& path, void* lib) {
  std::vector<std::string> missing;
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> data(
      (std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto size = data.size();
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64) {
    return missing;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  auto section = [&](size_t i, Elf64_Shdr& sh) {
    const size_t off = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (i >= eh.e_shnum || off + sizeof(Elf64_Shdr) > size) {
      return false;
    }
    std::memcpy(&sh, data.data() + off, sizeof(sh));
    return sh.sh_offset + sh.sh_size <= size;
  };
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr symtab;
    Elf64_Shdr strtab;
    if (!section(i, symtab) || symtab.sh_type != SHT_DYNSYM ||
        !section(symtab.sh_link, strtab)) {
      continue;
    }
    for (size_t off = 0; off + sizeof(Elf64_Sym) <= symtab.sh_size;
         off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, data.data() + symtab.sh_offset + off, sizeof(sym));
      if (sym.st_shndx != SHN_UNDEF || ELF64_ST_BIND(sym.st_info) != STB_GLOBAL ||
          sym.st_name >= strtab.sh_size) {
        continue;
      }
      const char* begin = data.data() + strtab.sh_offset + sym.st_name;
      const std::string name(
          begin, strnlen(begin, strtab.sh_size - sym.st_name));
      if (name.empty() || name.rfind("nvml", 0) == 0 ||
          dlsym(lib, name.c_str()) != nullptr ||
          dlsym(RTLD_DEFAULT, name.c_str()) != nullptr) {
        continue;
      }
      missing.push_back(name);
    }
  }
  return missing;
}

template <typename Fn>
void resolve(void* lib, const char* name, Fn& fn, const std::string& path) {
  dlerror();
  void* sym = dlsym(lib, name);
  TORCH_CHECK(
      sym != nullptr,
      "zipccl: ",
      path,
      " does not export ",
      name,
      " (is it an older libzipccl.so?)");
  fn = reinterpret_cast<Fn>(sym);
}

} // namespace

void writeMessage(char* dst, int32_t cap, const std::string& msg) {
  if (dst == nullptr || cap <= 0) {
    return;
  }
  size_t n = std::min(msg.size(), static_cast<size_t>(cap) - 1);
  std::memcpy(dst, msg.data(), n);
  dst[n] = '\0';
}

void loadLibrary(const std::string& path) {
  checkNotForked();
  std::lock_guard<std::mutex> lock(gLoadMu);
  if (gApiReady.load()) {
    TORCH_CHECK(
        path == gLoadedPath,
        "zipccl: libzipccl.so is already loaded from ",
        gLoadedPath,
        "; cannot load a second copy from ",
        path,
        " (only one Go runtime may exist per process)");
    return;
  }
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* first = dlerror();
    std::string why = first != nullptr ? first : "unknown dlopen error";
    // go-nvml leaves the NVML functions undefined on purpose (linked with
    // --unresolved-symbols=ignore-in-object-files) and binds them after it
    // dlopens libnvidia-ml at run time: such a library loads only with lazy
    // binding. The ABI functions are still all checked by dlsym below.
    if (why.find("undefined symbol: nvml") != std::string::npos) {
      lib = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
      if (lib == nullptr) {
        const char* second = dlerror();
        why = second != nullptr ? second : why;
      }
    }
    TORCH_CHECK(lib != nullptr, "zipccl: cannot load ", path, ": ", why);
    // Lazy binding would turn any other missing symbol into a process abort
    // at its first call: refuse such a library now, naming the symbols.
    const std::vector<std::string> missing = unresolvedSymbols(path, lib);
    if (!missing.empty()) {
      std::string names;
      for (const auto& name : missing) {
        names += (names.empty() ? "" : ", ") + name;
      }
      TORCH_CHECK(
          false,
          "zipccl: cannot load ",
          path,
          ": undefined symbols (a build error of libzipccl.so): ",
          names);
    }
  }
  // Never dlclose: a Go runtime cannot be unloaded.
  Api a{};
  resolve(lib, "zc_init", a.init, path);
  resolve(lib, "zc_comm_create", a.comm_create, path);
  resolve(lib, "zc_comm_submit", a.comm_submit, path);
  resolve(lib, "zc_comm_set_timeout", a.comm_set_timeout, path);
  resolve(lib, "zc_comm_monitored_barrier", a.comm_monitored_barrier, path);
  resolve(lib, "zc_comm_abort", a.comm_abort, path);
  resolve(lib, "zc_comm_destroy", a.comm_destroy, path);
  resolve(lib, "zc_comm_stats", a.comm_stats, path);
  resolve(lib, "zc_comm_hosts", a.comm_hosts, path);
  resolve(lib, "zc_comm_set_lossy", a.comm_set_lossy, path);
  resolve(lib, "zc_poll", a.poll, path);
  resolve(lib, "zc_info", a.info, path);
  resolve(lib, "zc_init_device", a.init_device, path);
  resolve(lib, "zc_comm_device_plan", a.comm_device_plan, path);
  resolve(lib, "zc_comm_device_flush", a.comm_device_flush, path);
  resolve(lib, "zc_codec_max_len", a.codec_max_len, path);
  resolve(lib, "zc_codec_encode_tensor", a.codec_encode_tensor, path);
  resolve(lib, "zc_codec_decode_header", a.codec_decode_header, path);
  resolve(lib, "zc_codec_decode_tensor", a.codec_decode_tensor, path);
  resolve(lib, "zc_codec_estimate", a.codec_estimate, path);
  resolve(lib, "zc_codec_bench", a.codec_bench, path);
  int32_t version = a.init(&storeSet, &storeGet);
  TORCH_CHECK(
      version == ZC_ABI_VERSION,
      "zipccl: ",
      path,
      " speaks ABI version ",
      version,
      " but this build of zipccl._C expects ",
      ZC_ABI_VERSION,
      "; rebuild both from the same checkout");
  // Before any communicator exists, so that no device op can be polled
  // without it.
  version = a.init_device(&deviceQuery);
  TORCH_CHECK(
      version == ZC_ABI_VERSION,
      "zipccl: ",
      path,
      ": zc_init_device returned ",
      version,
      " (expected ABI version ",
      ZC_ABI_VERSION,
      ")");
  gApi = a;
  gLoadedPath = path;
  pthread_atfork(nullptr, nullptr, &onForkChild);
  std::atexit(&onExit);
  gApiReady.store(true);
  gLastBusyNs.store(nowNs());
  gIdlePollers.fetch_add(1);
  std::thread(&pollerLoop).detach();
  std::thread(&watchdogLoop).detach();
}

bool libraryLoaded() {
  return gApiReady.load();
}

const Api& api() {
  checkNotForked();
  TORCH_CHECK(
      gApiReady.load(),
      "zipccl: libzipccl.so is not loaded (zipccl._C._load was not called)");
  return gApi;
}

bool forked() {
  return gForked.load();
}

void checkNotForked() {
  TORCH_CHECK(!gForked.load(), kForkedMessage);
}

void markExiting() {
  // Called by Python's atexit with the GIL held: release it so that the
  // completions in progress that need it can finish, then wait for them
  // (a bounded time: one may be blocked for good on a work that is now
  // leaked).
  GilRelease nogil;
  std::unique_lock<std::mutex> lock(gCompletionMu);
  gExiting.store(true);
  gCompletionCv.wait_for(lock, std::chrono::seconds(10), [] { return gCompleting == 0; });
}

bool exiting() {
  if (gExiting.load()) {
    return true;
  }
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

uint64_t nextTicket() {
  return gNextTicket.fetch_add(1);
}

void track(uint64_t ticket, const c10::intrusive_ptr<ZipcclWork>& work) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.works.emplace(ticket, work);
}

void untrack(uint64_t ticket) {
  take(ticket);
}

GilRelease::GilRelease() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    state_ = PyEval_SaveThread();
  }
}

GilRelease::~GilRelease() {
  if (state_ != nullptr) {
    PyEval_RestoreThread(static_cast<PyThreadState*>(state_));
  }
}

std::string readJSON(
    const std::function<int32_t(char*, int32_t)>& fill,
    const char* what) {
  std::string buf(4096, '\0');
  for (;;) {
    int32_t n = fill(buf.data(), static_cast<int32_t>(buf.size()));
    TORCH_CHECK(n >= 0, "zipccl: ", what, " failed with ", n);
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(n);
      return buf;
    }
    buf.assign(static_cast<size_t>(n) + 1, '\0');
  }
}

} // namespace zipccl
