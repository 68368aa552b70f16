// lossy: the group's lossy policy (backend/lossy), for zipccl.set_lossy().
#include "backend.hpp"

namespace zipccl {

void ZipcclBackend::setLossy(const std::string& spec) {
  checkUsable("set_lossy");
  char err[2048] = {0};
  int32_t rc = api().comm_set_lossy(comm_, spec.c_str(), err, sizeof(err));
  TORCH_CHECK(
      rc == ZC_OK,
      err[0] != '\0' ? std::string(err)
                     : std::string("zipccl: zc_comm_set_lossy failed"));
}

} // namespace zipccl
