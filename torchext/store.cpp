#include "store.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime.hpp"

namespace zipccl {
namespace {

// PrefixStore keeps its prefix protected, with no getter; a pointer to
// member named through a derived class may be applied to any PrefixStore.
struct PrefixOf : c10d::PrefixStore {
  static std::string c10d::PrefixStore::*member() {
    return &PrefixOf::prefix_;
  }
};

// One private connection per store server, shared by all of this
// process's groups. A connection per group cost each group creation a
// clone (a new TCP connection and a ping the server answers late once it
// holds hundreds: seconds per group under Megatron's dozens of groups).
// Private, because the caller's own connection may sit in a long wait()
// (torch's store-based barrier), and TCPStore serialises a connection's ops.
struct Connection {
  c10::intrusive_ptr<c10d::Store> root; // the caller's, kept so its address stays unique
  c10::intrusive_ptr<c10d::Store> own;
};
std::mutex gConnMu;
std::vector<Connection> gConns;

c10::intrusive_ptr<c10d::Store> connectionTo(const c10::intrusive_ptr<c10d::Store>& root) {
  std::lock_guard<std::mutex> lock(gConnMu);
  // servers no group uses any more (after destroy_process_group): only
  // this list still holds their stores
  gConns.erase(
      std::remove_if(gConns.begin(), gConns.end(), [](const Connection& c) {
        return c.root.use_count() == 1;
      }),
      gConns.end());
  for (const auto& c : gConns) {
    if (c.root.get() == root.get()) {
      return c.own;
    }
  }
  c10::intrusive_ptr<c10d::Store> own;
  try {
    own = root->clone();
  } catch (const std::exception&) {
    own = nullptr;
  }
  // a store that cannot clone is shared with the caller: every op below is
  // one short round trip, so neither side waits long for the other
  gConns.push_back({root, own ? own : root});
  return gConns.back().own;
}

// Waits poll with check(): each op on the shared connection stays one
// round trip, so no group's wait holds up another's (a blocking wait()
// would hold the connection's lock until its key appears).
constexpr std::chrono::milliseconds kFirstPause{1};
constexpr std::chrono::milliseconds kMaxPause{20};

// c10d stores report a timed-out wait as DistStoreError or TimeoutError,
// with "timeout" in the text.
bool isTimeout(std::string what, const std::exception* e) {
  if (dynamic_cast<const c10d::TimeoutError*>(e) != nullptr) {
    return true;
  }
  std::transform(what.begin(), what.end(), what.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return what.find("timeout") != std::string::npos ||
      what.find("timed out") != std::string::npos;
}

} // namespace

StoreHandle* newStoreHandle(const c10::intrusive_ptr<c10d::Store>& store) {
  TORCH_CHECK(store, "zipccl: the process group was created without a store");
  std::vector<std::string> prefixes;
  c10::intrusive_ptr<c10d::Store> root = store;
  while (auto* p = dynamic_cast<c10d::PrefixStore*>(root.get())) {
    prefixes.push_back(p->*PrefixOf::member());
    root = p->getUnderlyingStore();
  }
  c10::intrusive_ptr<c10d::Store> own = connectionTo(root);
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    own = c10::make_intrusive<c10d::PrefixStore>(*it, own);
  }
  return new StoreHandle{own};
}

int32_t storeSet(
    uintptr_t store,
    const char* key,
    const void* val,
    int64_t len,
    char* err,
    int32_t errlen) noexcept {
  try {
    auto* handle = reinterpret_cast<StoreHandle*>(store);
    const auto* bytes = static_cast<const uint8_t*>(val);
    std::vector<uint8_t> value(bytes, bytes + std::max<int64_t>(len, 0));
    handle->store->set(key, value);
    return 0;
  } catch (const c10::Error& e) {
    writeMessage(
        err,
        errlen,
        std::string("store set '") + key + "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    writeMessage(err, errlen, std::string("store set '") + key + "': " + e.what());
  } catch (...) {
    writeMessage(err, errlen, std::string("store set '") + key + "': unknown error");
  }
  return 1;
}

int32_t storeGet(
    uintptr_t store,
    const char* key,
    int64_t timeout_ms,
    void* buf,
    int64_t cap,
    int64_t* len,
    char* err,
    int32_t errlen) noexcept {
  try {
    auto* handle = reinterpret_cast<StoreHandle*>(store);
    const auto timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms)
                                        : handle->store->getTimeout();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = kFirstPause;
    while (!handle->store->check({key})) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        writeMessage(
            err,
            errlen,
            std::string("store get '") + key + "': timed out after " +
                std::to_string(timeout.count()) + " ms waiting for the key");
        return ZC_ERR_TIMEOUT;
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, left));
      pause = std::min(pause * 2, kMaxPause);
    }
    std::vector<uint8_t> value = handle->store->get(key);
    *len = static_cast<int64_t>(value.size());
    if (*len > cap) {
      writeMessage(
          err,
          errlen,
          std::string("store get '") + key + "': value is " +
              std::to_string(value.size()) + " bytes, buffer holds " +
              std::to_string(cap));
      return 2;
    }
    if (!value.empty()) {
      std::memcpy(buf, value.data(), value.size());
    }
    return 0;
  } catch (const c10::Error& e) {
    writeMessage(
        err,
        errlen,
        std::string("store get '") + key + "': " + e.what_without_backtrace());
    return isTimeout(e.what_without_backtrace(), &e) ? ZC_ERR_TIMEOUT : 1;
  } catch (const std::exception& e) {
    writeMessage(err, errlen, std::string("store get '") + key + "': " + e.what());
    return isTimeout(e.what(), &e) ? ZC_ERR_TIMEOUT : 1;
  } catch (...) {
    writeMessage(err, errlen, std::string("store get '") + key + "': unknown error");
  }
  return 1;
}

} // namespace zipccl
