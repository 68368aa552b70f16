// hosts: the group's ranks grouped by host (backend/hosts), for
// zipccl.topology() and zipccl.host_groups().
#include "backend.hpp"

namespace zipccl {

std::string ZipcclBackend::hosts() {
  checkUsable("topology");
  const Api& a = api();
  return readJSON(
      [&](char* buf, int32_t cap) {
        char err[2048] = {0};
        int32_t n = a.comm_hosts(comm_, buf, cap, err, sizeof(err));
        TORCH_CHECK(
            n >= 0,
            err[0] != '\0' ? std::string(err)
                           : std::string("zipccl: zc_comm_hosts failed"));
        return n;
      },
      "zc_comm_hosts");
}

} // namespace zipccl
