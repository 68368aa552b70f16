// test_main.cpp: runs zipccl's CUDA kernels (cuda/zc_kernels.h) through the C
// API (cuda/zc_api.cpp) on the CPU emulator, on the golden vectors of the Go
// codec, and checks identical bytes (encode) and identical tensors (decode,
// decode+reduce); single-bit corruptions must be rejected exactly when the
// Go decoder rejects them.
//
//   emu_test [--order fwd|rev|rand] [--seed N] [--resident N] [--fault NAME]
//            [--filter SUBSTR] [--quick] [--verbose] [--quant quant.bin] golden.bin
//
// --quant also runs the lossy quantization kernels' tests (test_quant.cpp)
// on package quant's golden vectors.
//
// Exit status: 0 all passed, 1 a test failed, 2 usage / input error, 3 an
// emulator violation (see emu.h).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "../../cuda/zc_format.h"
#include "../../cuda/zipccl_cuda.h"
#include "devbuf.h"
#include "emu.h"
#include "golden.h"
#include "test_quant.h"

using golden::Bytes;

namespace {

int g_pass = 0, g_fail = 0;
bool g_verbose = false;
bool g_quick = false;
std::string g_filter;
zccl_ctx* g_ctx = nullptr;

void check(bool ok, const std::string& what) {
  if (ok) {
    g_pass++;
    if (g_verbose) printf("ok   %s\n", what.c_str());
  } else {
    g_fail++;
    printf("FAIL %s\n", what.c_str());
  }
}

// Device memory (devbuf.h), filled with 0xEE unless a test says otherwise.
struct Buf : DevBuf {
  explicit Buf(size_t bytes, size_t mis = 0, uint8_t fill = 0xEE) : DevBuf(bytes, mis, fill) {}
};

std::string where(const Bytes& frame, size_t off, int dtype) {
  char buf[160];
  if (off < 32) {
    snprintf(buf, sizeof buf, "header byte %zu", off);
    return buf;
  }
  uint64_t numel = zc::get_u64(frame.data() + 8);
  zc::Plan p = zc::plan_of(zc::fmt_of(dtype), frame[5], (int64_t)numel);
  size_t s = off - 32;
  if ((int64_t)s < p.index_len) {
    snprintf(buf, sizeof buf, "index entry %zu byte %zu", s / 16, s % 16);
  } else if ((int64_t)s < p.static_len) {
    int64_t r = (int64_t)s - p.index_len;
    snprintf(buf, sizeof buf, "static record of block %lld, byte %lld", (long long)(r / p.full_len),
             (long long)(r % p.full_len));
  } else {
    snprintf(buf, sizeof buf, "dynamic part byte %lld", (long long)((int64_t)s - p.static_len));
  }
  return buf;
}

bool same_bytes(const uint8_t* got, size_t got_n, const Bytes& want, const std::string& what, int dtype,
                bool is_frame) {
  if (got_n != want.size()) {
    printf("     %s: length %zu, want %zu\n", what.c_str(), got_n, want.size());
    return false;
  }
  for (size_t i = 0; i < got_n; i++) {
    if (got[i] != want[i]) {
      printf("     %s: first difference at byte %zu (%s): got %02x, want %02x\n", what.c_str(), i,
             is_frame ? where(want, i, dtype).c_str() : "data", got[i], want[i]);
      return false;
    }
  }
  return true;
}

void put(uint8_t* dst, const Bytes& b) {
  if (!b.empty()) memcpy(dst, b.data(), b.size());
}

bool want(const std::string& name) { return g_filter.empty() || name.find(g_filter) != std::string::npos; }

struct CodecCase {
  std::string name;
  int dtype;
  std::vector<int64_t> counts;
  Bytes input;
  std::vector<Bytes> frames, statics, dynamics;
};

CodecCase load_codec(const std::map<std::string, Bytes>& g, const std::string& name) {
  CodecCase c;
  c.name = name;
  auto m = golden::parse_meta(g.at(name + "/meta"));
  c.dtype = std::stoi(m["dtype"]);
  int64_t total = 0;
  for (const std::string& s : golden::split(m["counts"], ',')) {
    c.counts.push_back(std::stoll(s));
    total += c.counts.back();
  }
  c.input = golden::generate(c.dtype, m["dist"], total, std::stoull(m["seed"]));
  uint32_t crc = zc::get_u32(g.at(name + "/crc").data());
  check(zc::crc32c_host(c.input.data(), (int64_t)c.input.size()) == crc, name + ": regenerated input matches the Go generator");
  for (size_t k = 0; k < c.counts.size(); k++) {
    const Bytes& f = g.at(name + "/frame/" + std::to_string(k));
    c.frames.push_back(f);
    auto st = g.find(name + "/static/" + std::to_string(k));
    if (st != g.end()) {
      c.statics.push_back(st->second);
      c.dynamics.push_back(g.at(name + "/dynamic/" + std::to_string(k)));
    } else {
      int64_t sl = zccl_zip3_static_len(c.dtype, c.counts[k]);
      c.statics.push_back(Bytes(f.begin() + 32, f.begin() + 32 + sl));
      c.dynamics.push_back(Bytes(f.begin() + 32 + sl, f.end()));
    }
  }
  return c;
}

void test_encode(const CodecCase& c, size_t mis, const char* tag) {
  const int n = (int)c.counts.size();
  const int size = zc::fmt_of(c.dtype).size;
  Buf src(c.input.size(), mis);
  put(src.p, c.input);
  // frames, in the chunk-per-destination slot layout
  std::vector<int64_t> off(n + 1);
  check(zccl_frame_slots(c.dtype, c.counts.data(), n, off.data()) == ZCCL_OK, c.name + ": frame slots");
  Buf out((size_t)off[n] + 1, 0, 0xCD);
  std::vector<int64_t> lens(n + 1, -7);
  int64_t wsn = zccl_encode_workspace_size(c.dtype, c.counts.data(), n);
  Buf ws((size_t)wsn, 0, 0x77);
  zccl_status st = zccl_encode_frames(g_ctx, c.dtype, src.p, c.counts.data(), n, out.p, off.data(), lens.data(), ws.p,
                                      wsn, nullptr, ZCCL_FLAG_SYNC);
  check(st == ZCCL_OK, c.name + tag + ": encode_frames status " + zccl_status_string(st) + " " + zccl_last_error());
  for (int k = 0; k < n; k++) {
    std::string what = c.name + tag + ": frame " + std::to_string(k) + " identical to Go";
    check(lens[k] >= 0 && same_bytes(out.p + off[k], (size_t)std::max<int64_t>(0, lens[k]), c.frames[k], what, c.dtype, true),
          what);
  }
  // split parts
  std::vector<int64_t> soff(n + 1, 0), doff(n + 1, 0);
  for (int k = 0; k < n; k++) {
    soff[k + 1] = soff[k] + zccl_zip3_static_len(c.dtype, c.counts[k]);
    doff[k + 1] = doff[k] + zccl_zip3_max_dynamic_len(c.dtype, c.counts[k]);
  }
  Buf sbuf((size_t)soff[n] + 1, 0, 0xCD), dbuf((size_t)doff[n] + 1, 0, 0xCD);
  std::vector<int64_t> dl(n + 1, -7);
  st = zccl_encode_split(g_ctx, c.dtype, src.p, c.counts.data(), n, sbuf.p, soff.data(), dbuf.p, doff.data(), dl.data(),
                         ws.p, wsn, nullptr, ZCCL_FLAG_SYNC);
  check(st == ZCCL_OK, c.name + tag + ": encode_split status");
  for (int k = 0; k < n; k++) {
    std::string what = c.name + tag + ": split static " + std::to_string(k) + " identical to Go";
    check(same_bytes(sbuf.p + soff[k], (size_t)(soff[k + 1] - soff[k]), c.statics[k], what, c.dtype, false), what);
    what = c.name + tag + ": split dynamic " + std::to_string(k) + " identical to Go";
    check(dl[k] >= 0 && same_bytes(dbuf.p + doff[k], (size_t)std::max<int64_t>(0, dl[k]), c.dynamics[k], what, c.dtype, false),
          what);
  }
  (void)size;
}

void test_decode(const CodecCase& c, size_t in_mis, size_t out_mis, const char* tag) {
  const int n = (int)c.counts.size();
  // pack the Go frames back to back at (possibly misaligned) offsets
  std::vector<int64_t> off(n), cap(n);
  int64_t total = 0;
  for (int k = 0; k < n; k++) {
    off[k] = total + (int64_t)in_mis;
    cap[k] = (int64_t)c.frames[k].size();
    total = off[k] + cap[k];
  }
  Buf in((size_t)total + 1);
  for (int k = 0; k < n; k++) put(in.p + off[k], c.frames[k]);
  Buf dst(c.input.size(), out_mis, 0xCD);
  int64_t wsn = zccl_decode_workspace_size(c.dtype, c.counts.data(), n);
  Buf ws((size_t)wsn, 0, 0x77);
  char msg[256] = "";
  zccl_status st = zccl_decode_frames(g_ctx, c.dtype, in.p, off.data(), cap.data(), c.counts.data(), n, dst.p, ws.p, wsn,
                                      nullptr, 0);
  zccl_status ks = zccl_workspace_status(g_ctx, ws.p, nullptr, msg, sizeof msg);
  check(st == ZCCL_OK && ks == ZCCL_OK, c.name + tag + ": decode_frames status " + msg);
  std::string what = c.name + tag + ": decoded frames equal the input";
  check(same_bytes(dst.p, c.input.size(), c.input, what, c.dtype, false), what);
  // split parts
  std::vector<int64_t> soff(n), doff(n), dlen(n);
  int64_t stot = 0, dtot = 0;
  for (int k = 0; k < n; k++) {
    soff[k] = stot;
    stot += (int64_t)c.statics[k].size();
    doff[k] = dtot;
    dlen[k] = (int64_t)c.dynamics[k].size();
    dtot += dlen[k];
  }
  Buf sb((size_t)stot + 1), db((size_t)dtot + 1);
  for (int k = 0; k < n; k++) {
    put(sb.p + soff[k], c.statics[k]);
    put(db.p + doff[k], c.dynamics[k]);
  }
  Buf dst2(c.input.size(), out_mis, 0xCD);
  st = zccl_decode_split(g_ctx, c.dtype, ZCCL_KIND_ZIP3, sb.p, soff.data(), db.p, doff.data(), dlen.data(),
                         c.counts.data(), n, dst2.p, ws.p, wsn, nullptr, ZCCL_FLAG_SYNC);
  check(st == ZCCL_OK, c.name + tag + ": decode_split status " + zccl_status_string(st) + " " + zccl_last_error());
  what = c.name + tag + ": decoded split parts equal the input";
  check(same_bytes(dst2.p, c.input.size(), c.input, what, c.dtype, false), what);
}

void test_reduce(const std::map<std::string, Bytes>& g, const std::string& name) {
  auto m = golden::parse_meta(g.at(name + "/meta"));
  const int dtype = std::stoi(m["dtype"]);
  const int op = std::stoi(m["rop"]);
  const int64_t n = std::stoll(m["n"]);
  const uint64_t seed = std::stoull(m["seed"]);
  const std::vector<std::string> dists = golden::split(m["dists"], ',');
  const int nsrc = (int)dists.size();
  const Bytes& want_out = g.at(name + "/out");
  const int size = zc::fmt_of(dtype).size;
  std::vector<Bytes> frames, inputs;
  for (int r = 0; r < nsrc; r++) {
    frames.push_back(g.at(name + "/frame/" + std::to_string(r)));
    inputs.push_back(golden::generate(dtype, dists[r], n, seed + (uint64_t)r * 1000));
    check(zc::crc32c_host(inputs[r].data(), (int64_t)inputs[r].size()) == zc::get_u32(g.at(name + "/crc/" + std::to_string(r)).data()),
          name + ": regenerated source " + std::to_string(r));
  }
  int64_t wsn = zccl_reduce_workspace_size(dtype, n, nsrc);
  Buf ws((size_t)wsn, 0, 0x77);
  // variant 0: every source a frame; 1: split parts; 2: source (nsrc-1)/2
  // plain; 3 and 4: 2 and 0 with every buffer 16-byte aligned (the direct
  // path of full blocks: the others have misaligned sources or output)
  for (int variant = 0; variant < 5; variant++) {
    const bool aligned = variant >= 3;
    std::vector<Buf*> bufs;
    std::vector<zccl_source> srcs(nsrc);
    for (int r = 0; r < nsrc; r++) {
      const Bytes& f = frames[r];
      if (variant == 0 || variant == 4) {
        Buf* b = new Buf(f.size(), aligned ? 0 : (size_t)r * 4 % 16);
        memcpy(b->p, f.data(), f.size());
        bufs.push_back(b);
        srcs[r] = zccl_source{ZCCL_SRC_FRAME, b->p, nullptr, (int64_t)f.size()};
      } else if ((variant == 2 || variant == 3) && r == (nsrc - 1) / 2) {
        Buf* b = new Buf(inputs[r].size(), aligned ? 0 : (size_t)size);
        memcpy(b->p, inputs[r].data(), inputs[r].size());
        bufs.push_back(b);
        srcs[r] = zccl_source{ZCCL_SRC_PLAIN, b->p, nullptr, 0};
      } else {
        int kind = f[5];
        int64_t sl = zc::plan_of(zc::fmt_of(dtype), kind, n).static_len;
        Buf* b = new Buf(f.size() - 32);
        memcpy(b->p, f.data() + 32, f.size() - 32);
        bufs.push_back(b);
        if (kind == zc::KIND_ZIP3) {
          srcs[r] = zccl_source{ZCCL_SRC_SPLIT_ZIP3, b->p, b->p + sl, (int64_t)f.size() - 32 - sl};
        } else {
          srcs[r] = zccl_source{ZCCL_SRC_SPLIT_RAW, b->p, nullptr, 0};
        }
      }
    }
    Buf dst(want_out.size(), variant == 1 ? (size_t)size : 0, 0xCD);
    char msg[256] = "";
    zccl_status st = zccl_decode_reduce(g_ctx, dtype, op, srcs.data(), nsrc, n, dst.p, ws.p, wsn, nullptr, 0);
    zccl_status ks = zccl_workspace_status(g_ctx, ws.p, nullptr, msg, sizeof msg);
    static const char* vn[] = {"frames", "split parts", "one plain source", "one plain source, aligned",
                               "frames, aligned"};
    check(st == ZCCL_OK && ks == ZCCL_OK, name + " (" + vn[variant] + "): status " + zccl_status_string(st) + " " + msg);
    std::string what = name + " (" + vn[variant] + "): decode+reduce output identical to Go's fold";
    check(same_bytes(dst.p, want_out.size(), want_out, what, dtype, false), what);
    for (Buf* b : bufs) delete b;
  }
}

const char* class_of(zccl_status s) {
  switch (s) {
    case ZCCL_OK: return "ok";
    case ZCCL_ERR_CHECKSUM: return "checksum";
    case ZCCL_ERR_TRUNCATED: return "truncated";
    case ZCCL_ERR_VERSION: return "version";
    case ZCCL_ERR_SIZE: return "size";
    case ZCCL_ERR_DTYPE: return "dtype";
    case ZCCL_ERR_KIND: return "kind";
    case ZCCL_ERR_CORRUPT: return "corrupt";
    default: return "other";
  }
}

void test_flips(const std::map<std::string, Bytes>& g, std::map<std::string, CodecCase>& cases) {
  std::string text(g.at("flips").begin(), g.at("flips").end());
  int same_class = 0, total = 0;
  int limit = g_quick ? 24 : 1 << 30;
  for (const std::string& line : golden::split(text, '\n')) {
    if (line.empty()) continue;
    if (total >= limit) break;
    auto m = golden::parse_meta(Bytes(line.begin(), line.end()));
    auto it = cases.find(m["case"]);
    if (it == cases.end() || !want(m["case"])) continue;
    const CodecCase& c = it->second;
    int k = std::stoi(m["chunk"]);
    Bytes bad = c.frames[k];
    size_t pos = std::stoull(m["byte"]);
    bad[pos] ^= (uint8_t)(1u << std::stoi(m["bit"]));
    Buf in(bad.size());
    memcpy(in.p, bad.data(), bad.size());
    int64_t off = 0, cap = (int64_t)bad.size();
    int64_t cnt = c.counts[k];
    int size = zc::fmt_of(c.dtype).size;
    Buf dst((size_t)cnt * size + 1);
    int64_t wsn = zccl_decode_workspace_size(c.dtype, &cnt, 1);
    Buf ws((size_t)wsn);
    char msg[256] = "";
    zccl_status st = zccl_decode_frames(g_ctx, c.dtype, in.p, &off, &cap, &cnt, 1, dst.p, ws.p, wsn, nullptr, 0);
    zccl_status ks = st == ZCCL_OK ? zccl_workspace_status(g_ctx, ws.p, nullptr, msg, sizeof msg) : st;
    std::string go = m["err"];
    bool go_ok = go == "ok";
    total++;
    if (go == class_of(ks)) same_class++;
    check((ks == ZCCL_OK) == go_ok, "flip " + line + ": GPU verdict " + class_of(ks) + " (" + msg + ")");
  }
  printf("     corruption verdicts: %d flips, error class identical to Go's for %d\n", total, same_class);
}

// Decodes the one-chunk frame bad of case c from a buffer offset by mis
// bytes (4: the tiled path, and a misaligned index); returns the verdict
// and the workspace's message in msg.
zccl_status decode_corrupted(const CodecCase& c, const Bytes& bad, size_t mis, char (&msg)[256]) {
  Buf in(bad.size(), mis);
  memcpy(in.p, bad.data(), bad.size());
  int64_t off = 0, cap = (int64_t)bad.size(), cnt = c.counts[0];
  Buf dst((size_t)cnt * zc::fmt_of(c.dtype).size + 1);
  int64_t wsn = zccl_decode_workspace_size(c.dtype, &cnt, 1);
  Buf ws((size_t)wsn);
  msg[0] = 0;
  zccl_status st = zccl_decode_frames(g_ctx, c.dtype, in.p, &off, &cap, &cnt, 1, dst.p, ws.p, wsn, nullptr, 0);
  return st == ZCCL_OK ? zccl_workspace_status(g_ctx, ws.p, nullptr, msg, sizeof msg) : st;
}

// An escape byte that holds a field the window codes (or one beyond the
// format) is corrupt: the decoder must say so, not just fail the block's
// CRC. Block 0's first escape is overwritten, in the direct path (aligned
// frame) and the tiled path (misaligned), for the cases that have one.
void test_escape_values(std::map<std::string, CodecCase>& cases) {
  const char* names[] = {"bf16_wide_block", "bf16_gauss_5blocks", "fp32_special_block", "e5m2_gauss_block"};
  for (const char* name : names) {
    auto it = cases.find(name);
    if (it == cases.end() || !want(name)) continue;
    const CodecCase& c = it->second;
    const Bytes& frame = c.frames[0];
    const zc::Fmt f = zc::fmt_of(c.dtype);
    if (frame[5] != zc::KIND_ZIP3) continue;
    const zc::Plan pl = zc::plan_of(f, zc::KIND_ZIP3, c.counts[0]);
    const size_t idx = zc::kHeaderLen, dyn = zc::kHeaderLen + (size_t)pl.static_len;
    if (zc::get_u32(&frame[idx + 4]) == 0) continue;  // block 0 has no escape
    const zc::Window win = {frame[idx + 8], frame[idx + 9]};
    // a field the window codes; for a format narrower than a byte, also one beyond it
    std::vector<uint8_t> values = {(uint8_t)zc::field_of(win, 2)};
    if (zc::max_field(f) < 255) values.push_back(0xFF);
    for (uint8_t v : values) {
      for (size_t mis : {(size_t)0, (size_t)4}) {
        Bytes bad = frame;
        bad[dyn] = v;
        char msg[256];
        const zccl_status ks = decode_corrupted(c, bad, mis, msg);
        check(ks == ZCCL_ERR_CORRUPT && strstr(msg, "escape holds") != nullptr,
              std::string(name) + ": escape byte " + std::to_string(v) + (mis ? " (tiled path)" : "") +
                  " rejected as an escape value, got " + class_of(ks) + " (" + msg + ")");
      }
    }
  }
}

// Bytes 10 to 15 of an index entry are reserved (0): each one set alone
// must be reported as such, for the first and the last block, with the
// entry aligned (read in one load) and misaligned (read bytewise).
void test_index_reserved(std::map<std::string, CodecCase>& cases) {
  const char* names[] = {"bf16_gauss_5blocks", "fp32_special_block"};
  for (const char* name : names) {
    auto it = cases.find(name);
    if (it == cases.end() || !want(name)) continue;
    const CodecCase& c = it->second;
    const Bytes& frame = c.frames[0];
    if (frame[5] != zc::KIND_ZIP3) continue;
    const zc::Plan pl = zc::plan_of(zc::fmt_of(c.dtype), zc::KIND_ZIP3, c.counts[0]);
    for (int64_t b : {(int64_t)0, pl.nblocks - 1}) {
      for (size_t k = 10; k < 16; k++) {
        for (size_t mis : {(size_t)0, (size_t)4}) {
          Bytes bad = frame;
          bad[zc::kHeaderLen + (size_t)(zc::kIndexEntry * b) + k] = 0x10;
          char msg[256];
          const zccl_status ks = decode_corrupted(c, bad, mis, msg);
          check(ks == ZCCL_ERR_CORRUPT && strstr(msg, "reserved index bytes") != nullptr,
                std::string(name) + ": block " + std::to_string(b) + " index byte " + std::to_string(k) +
                    (mis ? " (misaligned)" : "") + " rejected as reserved, got " + class_of(ks) + " (" + msg + ")");
        }
      }
    }
  }
}

// A corrupt source of a decode+reduce is reported, naming it, by the
// direct path (every buffer aligned) as by the tiled one (misaligned
// frames): a flipped R8 bit (CRC), an escape byte holding a coded field,
// and a group whose planes all read "escape" (more escapes than indexed).
void test_reduce_corrupt(const std::map<std::string, Bytes>& g) {
  const std::string name = "r_bf16_sum4_blocks";
  if (!want(name) || g.find(name + "/meta") == g.end()) return;
  auto m = golden::parse_meta(g.at(name + "/meta"));
  const int dtype = std::stoi(m["dtype"]);
  const int64_t n = std::stoll(m["n"]);
  const int nsrc = (int)golden::split(m["dists"], ',').size();
  const int bad_src = 1, blk = 1;
  const Bytes& frame = g.at(name + "/frame/" + std::to_string(bad_src));
  const zc::Fmt f = zc::fmt_of(dtype);
  if (frame[5] != zc::KIND_ZIP3) return;
  const zc::Plan pl = zc::plan_of(f, zc::KIND_ZIP3, n);
  const zc::Zip3Layout L = zc::zip3_layout(f, zc::kZip3Block);
  const size_t rec = zc::kHeaderLen + (size_t)pl.index_len + (size_t)(blk * pl.full_len);
  const size_t entry = zc::kHeaderLen + (size_t)(zc::kIndexEntry * blk);
  uint64_t before = 0;  // escapes of the blocks before blk
  for (int b = 0; b < blk; b++) before += zc::get_u32(&frame[zc::kHeaderLen + zc::kIndexEntry * b + 4]);
  const zc::Window win = {frame[entry + 8], frame[entry + 9]};
  struct Bad {
    const char* what;
    Bytes bytes;
    zccl_status want;
    const char* detail;
  };
  std::vector<Bad> bads;
  Bytes b1 = frame;
  b1[rec + (size_t)L.r8 + 1000] ^= 0x10;
  bads.push_back({"R8 bit", b1, ZCCL_ERR_CHECKSUM, "CRC-32C"});
  if (zc::get_u32(&frame[entry + 4]) != 0) {
    Bytes b2 = frame;
    b2[zc::kHeaderLen + (size_t)pl.static_len + before] = (uint8_t)zc::field_of(win, 2);
    bads.push_back({"escape value", b2, ZCCL_ERR_CORRUPT, "escape holds"});
  }
  Bytes b3 = frame;
  for (int j = 0; j < 3; j++) memset(&b3[rec + (size_t)(L.planes + j * L.plane_len) + 4 * 100], 0, 4);
  bads.push_back({"all-escape group", b3, ZCCL_ERR_CORRUPT, "escape"});
  for (const Bad& bad : bads) {
    for (bool aligned : {true, false}) {
      std::vector<Buf*> bufs;
      std::vector<zccl_source> srcs(nsrc);
      for (int r = 0; r < nsrc; r++) {
        const Bytes& fr = r == bad_src ? bad.bytes : g.at(name + "/frame/" + std::to_string(r));
        Buf* b = new Buf(fr.size(), aligned ? 0 : 4);
        memcpy(b->p, fr.data(), fr.size());
        bufs.push_back(b);
        srcs[r] = zccl_source{ZCCL_SRC_FRAME, b->p, nullptr, (int64_t)fr.size()};
      }
      int64_t wsn = zccl_reduce_workspace_size(dtype, n, nsrc);
      Buf ws((size_t)wsn), dst((size_t)n * f.size);
      char msg[256] = "";
      zccl_status st = zccl_decode_reduce(g_ctx, dtype, 0, srcs.data(), nsrc, n, dst.p, ws.p, wsn, nullptr, 0);
      zccl_status ks = st == ZCCL_OK ? zccl_workspace_status(g_ctx, ws.p, nullptr, msg, sizeof msg) : st;
      const std::string who = "chunk " + std::to_string(bad_src);
      check(ks == bad.want && strstr(msg, bad.detail) != nullptr && strstr(msg, who.c_str()) != nullptr,
            name + ": " + bad.what + " in source 1" + (aligned ? "" : " (tiled path)") + " reported as " +
                class_of(bad.want) + " of " + who + ", got " + class_of(ks) + " (" + msg + ")");
      for (Buf* b : bufs) delete b;
    }
  }
}

void test_api() {
  // argument checking, sizes, unsupported kinds
  int64_t cnt = 100;
  check(zccl_zip3_static_len(3, 16384) == 128 + 22528, "api: static length of a full bf16 block");
  check(zccl_zip3_static_len(99, 10) == -1, "api: invalid dtype has no size");
  check(zccl_max_frame_len(3, 0) == 32, "api: empty frame is a header");
  Buf ws(4096);
  check(zccl_encode_frames(g_ctx, 7, nullptr, &cnt, 1, nullptr, nullptr, nullptr, ws.p, 4096, nullptr, 0) ==
            ZCCL_ERR_UNSUPPORTED,
        "api: int32 is not coded on the GPU");
  check(zccl_decode_split(g_ctx, 3, ZCCL_KIND_HUFF, ws.p, &cnt, ws.p, &cnt, &cnt, &cnt, 1, ws.p, ws.p, 4096, nullptr, 0) ==
            ZCCL_ERR_UNSUPPORTED,
        "api: huff split parts are unsupported");
  check(zccl_decode_reduce(g_ctx, 3, 3 /*MIN*/, nullptr, 1, 10, nullptr, ws.p, 4096, nullptr, 0) == ZCCL_ERR_UNSUPPORTED,
        "api: MIN is not fused");
  int64_t need = zccl_encode_workspace_size(3, &cnt, 1);
  Buf src(200), out(4096);
  int64_t off = 0, len = 0;
  check(zccl_encode_frames(g_ctx, 3, src.p, &cnt, 1, out.p, &off, &len, ws.p, need - 1, nullptr, 0) == ZCCL_ERR_NOMEM,
        "api: small workspace rejected");
  // a huff frame header is reported as unsupported by the kernels
  uint8_t t0[256];
  (void)t0;
  uint32_t table[256];
  for (int i = 0; i < 256; i++) table[i] = zc::crc_byte_slow((uint32_t)i);
  Buf fr(64);
  zc::make_header(fr.p, table, zc::KIND_HUFF, 3, 100, 0);
  fr.p[7] = 16;
  zc::put_u32(fr.p + 28, ~zc::crc_update_bytes(table, 0xFFFFFFFFu, fr.p, 28));
  int64_t cap = 64;
  Buf dst(2 * 101);
  int64_t wsn = zccl_decode_workspace_size(3, &cnt, 1);
  Buf ws2((size_t)wsn);
  check(zccl_decode_frames(g_ctx, 3, fr.p, &off, &cap, &cnt, 1, dst.p, ws2.p, wsn, nullptr, ZCCL_FLAG_SYNC) ==
            ZCCL_ERR_UNSUPPORTED,
        "api: huff frames are reported unsupported by the decoder");
  // huff2 (kind 3, docs/FORMAT.md 4a) and packed huff2 (kind 4, 4b) are never
  // decoded on the GPU: a frame is refused as corrupt (an unknown kind to the
  // kernels), split parts as a kind error, before any output is written
  for (int kind = 3; kind <= 4; kind++) {
    zc::make_header(fr.p, table, kind, 3, 100, 0);
    fr.p[7] = 16;
    zc::put_u32(fr.p + 28, ~zc::crc_update_bytes(table, 0xFFFFFFFFu, fr.p, 28));
    check(zccl_decode_frames(g_ctx, 3, fr.p, &off, &cap, &cnt, 1, dst.p, ws2.p, wsn, nullptr, ZCCL_FLAG_SYNC) ==
              ZCCL_ERR_CORRUPT,
          kind == 3 ? "api: huff2 frames are refused by the decoder" : "api: packed huff2 frames are refused by the decoder");
    check(zccl_decode_split(g_ctx, 3, kind, ws.p, &cnt, ws.p, &cnt, &cnt, &cnt, 1, ws.p, ws.p, 4096, nullptr, 0) ==
              ZCCL_ERR_KIND,
          kind == 3 ? "api: huff2 split parts are refused" : "api: packed huff2 split parts are refused");
  }
  // wrong element count
  int64_t other = 101;
  wsn = zccl_decode_workspace_size(3, &other, 1);
  Buf ws3((size_t)wsn);
  zc::make_header(fr.p, table, zc::KIND_ZIP3, 3, 100, 0);
  check(zccl_decode_frames(g_ctx, 3, fr.p, &off, &cap, &other, 1, dst.p, ws3.p, wsn, nullptr, ZCCL_FLAG_SYNC) ==
            ZCCL_ERR_SIZE,
        "api: element count mismatch");
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, quant_path;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--order") {
      std::string o = next();
      zc_emu::config().order = o == "fwd" ? 0 : o == "rev" ? 1 : 2;
    } else if (a == "--seed") {
      zc_emu::config().seed = std::stoull(next());
    } else if (a == "--resident") {
      zc_emu::config().resident = std::stoi(next());
    } else if (a == "--fault") {
      zc_emu::config().fault = next();
    } else if (a == "--filter") {
      g_filter = next();
    } else if (a == "--quant") {
      quant_path = next();
    } else if (a == "--quick") {
      g_quick = true;
    } else if (a == "--verbose" || a == "-v") {
      g_verbose = true;
    } else if (a[0] == '-') {
      fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    } else {
      path = a;
    }
  }
  if (path.empty()) {
    fprintf(stderr, "usage: emu_test [options] golden.bin\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto g = golden::load(path);
  if (zccl_ctx_create(0, &g_ctx) != ZCCL_OK) {
    fprintf(stderr, "ctx: %s\n", zccl_last_error());
    return 2;
  }
  const zc_emu::Config& cfg = zc_emu::config();
  printf("cuda_emu: %s, order %s (seed %llu), %d resident blocks%s%s\n", zccl_build_info(),
         cfg.order == 0 ? "forward" : cfg.order == 1 ? "reverse" : "random", (unsigned long long)cfg.seed, cfg.resident,
         cfg.fault.empty() ? "" : ", FAULT ", cfg.fault.c_str());
  if (want("api")) test_api();
  std::map<std::string, CodecCase> cases;
  for (auto& kv : g) {
    const std::string& key = kv.first;
    if (key.size() < 5 || key.compare(key.size() - 5, 5, "/meta") != 0) continue;
    std::string name = key.substr(0, key.size() - 5);
    auto m = golden::parse_meta(kv.second);
    if (m["op"] == "codec") {
      cases[name] = load_codec(g, name);
      if (!want(name)) continue;
      const CodecCase& c = cases[name];
      int size = zc::fmt_of(c.dtype).size;
      test_encode(c, 0, "");
      test_decode(c, 0, 0, "");
      if (!g_quick) {
        test_encode(c, (size_t)size, " [src misaligned]");
        test_decode(c, 4, (size_t)size, " [in/out misaligned]");
      }
    } else if (m["op"] == "reduce") {
      if (want(name)) test_reduce(g, name);
    }
  }
  test_flips(g, cases);
  test_escape_values(cases);
  test_index_reserved(cases);
  test_reduce_corrupt(g);
  if (!quant_path.empty()) {
    QuantTestOptions qo;
    qo.filter = g_filter;
    qo.quick = g_quick;
    run_quant_tests(g_ctx, quant_path, qo, check);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const zc_emu::Stats& s = zc_emu::stats();
  printf("cuda_emu: %llu launches, %llu blocks, %llu warp intrinsics, %llu barriers, %.1f s\n",
         (unsigned long long)s.launches, (unsigned long long)s.blocks, (unsigned long long)s.warp_ops,
         (unsigned long long)s.barriers, secs);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  zccl_ctx_destroy(g_ctx);
  return g_fail == 0 ? 0 : 1;
}
