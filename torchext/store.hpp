// The c10d::Store bridge handed to Go: the handle behind
// zc_comm_config.store and the two callbacks (zc_store_set_fn,
// zc_store_get_fn) Go calls through it.
#pragma once

#include <cstdint>

#include "zipccl_torch.hpp"

namespace zipccl {

// The object behind zc_comm_config.store: owned by the backend, freed only
// after zc_comm_destroy returned.
struct StoreHandle {
  c10::intrusive_ptr<c10d::Store> store;
};

// A handle on the group's store over this process's private connection to
// the store's server (one per server, shared by every group), with the
// group's key prefixes.
StoreHandle* newStoreHandle(const c10::intrusive_ptr<c10d::Store>& store);

// Called by Go; no exception leaves them. storeGet returns 0 (found,
// copied), 2 (value longer than cap: *len is the size needed),
// ZC_ERR_TIMEOUT (the key did not appear in time) or 1 (any other failure),
// with a message in err for the nonzero codes.
int32_t storeSet(
    uintptr_t store,
    const char* key,
    const void* val,
    int64_t len,
    char* err,
    int32_t errlen) noexcept;
int32_t storeGet(
    uintptr_t store,
    const char* key,
    int64_t timeout_ms,
    void* buf,
    int64_t cap,
    int64_t* len,
    char* err,
    int32_t errlen) noexcept;

} // namespace zipccl
