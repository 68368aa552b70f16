// monitoredBarrier: torch.distributed.monitored_barrier on a zipccl group,
// with gloo's semantics and messages, carried out by the engine
// (backend/comm/monitor.go).
#include "backend.hpp"

namespace zipccl {

void ZipcclBackend::monitoredBarrier(
    const c10d::BarrierOptions& opts,
    bool waitAllRanks) {
  checkUsable("monitored_barrier");
  // -1 (kUnsetTimeout): the group's timeout; 0 is a real, zero timeout.
  const int64_t ms = opts.timeout.count() < 0 ? -1 : opts.timeout.count();
  char err[2048] = {0};
  int32_t rc = 0;
  {
    GilRelease nogil;
    rc = api().comm_monitored_barrier(
        comm_, ms, waitAllRanks ? 1 : 0, err, sizeof(err));
  }
  TORCH_CHECK(
      rc == ZC_OK,
      err[0] != '\0' ? std::string(err)
                     : "zipccl: monitored_barrier failed with error code " +
              std::to_string(rc));
}

} // namespace zipccl
