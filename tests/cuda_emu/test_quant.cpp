// test_quant.cpp: the lossy quantization kernels (cuda/zc_quant.h) through
// the C API on the CPU emulator, against package quant's golden vectors
// (tests/cuda_emu/golden/quant.bin, written by
// cuda/gotest/quant_golden_test.go): identical main and exact parts from
// the encoder (aligned and misaligned buffers, the exact part right after
// the main part, an exact buffer too small), identical tensors from the
// decoder (into the message's dtype and a float32 message into bfloat16
// and float16) and the accumulator (first, and chains of several messages
// from NaN, infinite and large initial values), and quant's verdict on
// every corrupted message, with its output when it accepts one.
#include "test_quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <string>
#include <vector>

#include "../../cuda/zc_quant.h"
#include "devbuf.h"
#include "golden.h"

namespace {

using golden::Bytes;
using Check = std::function<void(bool, const std::string&)>;

// Device memory (devbuf.h), filled with 0xCD unless a test says otherwise.
struct Buf : DevBuf {
  explicit Buf(size_t bytes, size_t mis = 0, uint8_t fill = 0xCD) : DevBuf(bytes, mis, fill) {}
};

using Golden = std::map<std::string, Bytes>;

uint32_t crc(const uint8_t* p, size_t n) { return zc::crc32c_host(p, (int64_t)n); }

// What a record says of some bytes: all of them, or (name/sum) their
// CRC-32C and length.
struct Want {
  bool stored = false;
  Bytes bytes;
  uint32_t crc = 0;
  uint64_t len = 0;
};

Want want_of(const Golden& g, const std::string& name) {
  Want w;
  auto it = g.find(name);
  if (it != g.end()) {
    w.stored = true;
    w.bytes = it->second;
    w.len = it->second.size();
    return w;
  }
  const Bytes& s = g.at(name + "/sum");
  w.crc = zc::get_u32(s.data());
  w.len = zc::get_u64(s.data() + 4);
  return w;
}

bool matches(const Want& w, const uint8_t* p, size_t n, std::string* why) {
  char buf[200];
  if (n != w.len) {
    snprintf(buf, sizeof buf, "length %zu, want %llu", n, (unsigned long long)w.len);
    *why = buf;
    return false;
  }
  if (!w.stored) {
    if (crc(p, n) == w.crc) return true;
    *why = "CRC-32C differs";
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (p[i] != w.bytes[i]) {
      snprintf(buf, sizeof buf, "first difference at byte %zu: got %02x, want %02x", i, p[i], w.bytes[i]);
      *why = buf;
      return false;
    }
  }
  return true;
}

int size_of(int dt) { return dt == ZCCL_FLOAT32 ? 4 : 2; }

// The C++ twin of quantGen (cuda/gotest/quant_golden_test.go).
Bytes gen(int dt, int64_t n, int64_t block, uint64_t seed) {
  golden::Splitmix r{seed};
  const int sz = size_of(dt);
  Bytes out((size_t)(n * sz));
  for (int64_t i = 0; i < n; i++) {
    const uint64_t x = r.next();
    const int64_t b = i / block, k = i % block;
    unsigned shift, ebits;
    uint64_t exp, exp_max;
    if (dt == ZCCL_BFLOAT16) {
      shift = 7, ebits = 8, exp_max = 255, exp = 100 + (x >> 20) % 40;
    } else if (dt == ZCCL_FLOAT16) {
      shift = 10, ebits = 5, exp_max = 31, exp = 1 + (x >> 20) % 29;
    } else {
      shift = 23, ebits = 8, exp_max = 255, exp = 100 + (x >> 20) % 40;
    }
    const uint64_t sign = x & 1;
    uint64_t mant = (x >> 32) & (((uint64_t)1 << shift) - 1);
    if (b % 7 == 3 && k == 5) {
      exp = exp_max;
      mant = (x >> 40) & 3;
    } else if (b % 11 == 6) {
      exp = 0, mant = 0;
    } else if (b % 13 == 9 && k % 3 == 0) {
      exp = 0;
    }
    const uint64_t v = sign << (shift + ebits) | exp << shift | mant;
    for (int j = 0; j < sz; j++) out[(size_t)(i * sz + j)] = (uint8_t)(v >> (8 * j));
  }
  return out;
}

struct Msg {
  Bytes main, exact;
};

struct QCase {
  std::string name;
  int dtype = 0, mode = 0, block = 0;
  int64_t n = 0;
  uint64_t seed = 0;
  Bytes input;
};

struct Runner {
  zccl_ctx* ctx;
  const Golden& g;
  QuantTestOptions opt;
  Check check;

  std::string status_text(zccl_status st) { return std::string(zccl_status_string(st)) + " (" + zccl_last_error() + ")"; }

  // Encodes c's input; the message and the call's status.
  zccl_status encode(const QCase& c, size_t mis_src, size_t mis_main, size_t mis_exact, bool contiguous,
                     int64_t exact_cap, Msg* out, int64_t* exact_len, bool* guards) {
    const int sz = size_of(c.dtype);
    Buf src(c.input.size(), mis_src);
    src.put(c.input);
    const int64_t ml = zccl_quant_main_len(c.mode, c.n, c.block);
    Buf main((size_t)(ml + (contiguous ? exact_cap : 0)), mis_main);
    Buf exact(contiguous ? 0 : (size_t)exact_cap, mis_exact);
    Buf lens(8, 0, 0x11);
    const int64_t wsn = zccl_quant_workspace_size(c.n);
    Buf ws((size_t)wsn, 0, 0x77);
    uint8_t* ex = contiguous ? main.p + ml : exact.p;
    const zccl_status st = zccl_quant_encode(ctx, c.dtype, c.mode, c.block, src.p, c.n, main.p, ex, exact_cap,
                                             (int64_t*)lens.p, ws.p, wsn, nullptr, ZCCL_FLAG_SYNC);
    memcpy(exact_len, lens.p, 8);
    out->main.assign(main.p, main.p + ml);
    const int64_t el = *exact_len >= 0 && *exact_len <= exact_cap ? *exact_len : 0;
    out->exact.assign(ex, ex + el);
    // nothing written past the main part or the exact part's length
    bool ok = main.guard_ok(0xCD) && exact.guard_ok(0xCD);
    for (int64_t i = ml + el; contiguous && i < ml + exact_cap; i++) ok = ok && main.p[i] == 0xCD;
    for (int64_t i = el; !contiguous && i < exact_cap; i++) ok = ok && exact.p[i] == 0xCD;
    *guards = ok;
    (void)sz;
    return st;
  }

  // Decodes (dt > 0) or accumulates (dt == 0, into acc_init or garbage) a
  // message; the call's status (the kernels' when the call succeeded) and
  // the output.
  zccl_status decode(const Msg& m, int dt, int64_t n, size_t mis_main, size_t mis_exact, size_t mis_dst,
                     const Bytes* acc_init, bool first, Bytes* out, bool* guard) {
    Buf main(m.main.size(), mis_main), exact(m.exact.size(), mis_exact);
    main.put(m.main);
    exact.put(m.exact);
    const size_t osz = (size_t)(dt > 0 ? size_of(dt) : 4);
    Buf dst((size_t)n * osz, mis_dst);
    if (acc_init != nullptr) dst.put(*acc_init);
    const int64_t wsn = zccl_quant_workspace_size(n);
    Buf ws((size_t)wsn, 0, 0x77);
    zccl_status st;
    if (dt > 0) {
      st = zccl_quant_decode(ctx, main.p, (int64_t)m.main.size(), exact.p, (int64_t)m.exact.size(), dt, n, dst.p, ws.p,
                             wsn, nullptr, ZCCL_FLAG_SYNC);
    } else {
      st = zccl_quant_accumulate(ctx, main.p, (int64_t)m.main.size(), exact.p, (int64_t)m.exact.size(), n,
                                 (float*)dst.p, first ? 1 : 0, ws.p, wsn, nullptr, ZCCL_FLAG_SYNC);
    }
    out->assign(dst.p, dst.p + dst.n);
    *guard = dst.guard_ok(0xCD) && main.guard_ok(0xCD) && exact.guard_ok(0xCD);
    return st;
  }

  QCase load(const std::string& name) {
    QCase c;
    c.name = name;
    auto m = golden::parse_meta(g.at(name + "/meta"));
    c.dtype = std::stoi(m["dtype"]);
    c.mode = std::stoi(m["mode"]);
    c.block = std::stoi(m["block"]);
    c.n = std::stoll(m["n"]);
    c.seed = std::stoull(m["seed"]);
    if (c.seed != 0) {
      c.input = gen(c.dtype, c.n, c.block, c.seed);
      std::string why;
      const bool same = matches(want_of(g, name + "/input"), c.input.data(), c.input.size(), &why);
      check(same, name + ": generated input matches the Go generator " + why);
    } else {
      c.input = g.at(name + "/input");
    }
    return c;
  }

  void run_case(const std::string& name, std::map<std::string, Msg>& msgs) {
    const QCase c = load(name);
    const int sz = size_of(c.dtype);
    const Want wmain = want_of(g, name + "/main"), wexact = want_of(g, name + "/exact");
    check(zccl_quant_main_len(c.mode, c.n, c.block) == (int64_t)wmain.len, name + ": zccl_quant_main_len is quant.MainLen");
    struct V {
      const char* tag;
      size_t src, main, exact;
      bool contiguous;
    };
    std::vector<V> vs = {{"", 0, 0, 0, false}, {" [exact after main]", 0, 0, 0, true}};
    if (!opt.quick) {
      vs.push_back({" [misaligned]", (size_t)sz, 1, 3, false});
      vs.push_back({" [misaligned, exact after main]", 4, 2, 0, true});
    }
    Msg mine;
    for (const V& v : vs) {
      Msg m;
      int64_t el = -1;
      bool guards = false;
      const zccl_status st = encode(c, v.src, v.main, v.exact, v.contiguous, c.n * sz, &m, &el, &guards);
      check(st == ZCCL_OK, name + v.tag + ": encode status " + status_text(st));
      std::string why;
      bool same = matches(wmain, m.main.data(), m.main.size(), &why);
      check(same, name + v.tag + ": main part identical to quant's " + why);
      check(el == (int64_t)wexact.len, name + v.tag + ": exact length " + std::to_string(el) + ", quant's " +
                                           std::to_string(wexact.len));
      why.clear();
      same = matches(wexact, m.exact.data(), m.exact.size(), &why);
      check(same, name + v.tag + ": exact part identical to quant's " + why);
      check(guards, name + v.tag + ": nothing written past the parts");
      if (v.tag[0] == 0) mine = m;
    }
    if (wexact.len > 0) {  // an exact buffer one byte short: reported, its length given, the main part whole
      Msg m;
      int64_t el = -1;
      bool guards = false;
      const zccl_status st = encode(c, 0, 0, 0, false, (int64_t)wexact.len - 1, &m, &el, &guards);
      check(st == ZCCL_ERR_TRUNCATED && el == (int64_t)wexact.len,
            name + ": exact buffer too small: status " + zccl_status_string(st) + ", length " + std::to_string(el));
      std::string why;
      const bool same = matches(wmain, m.main.data(), m.main.size(), &why);
      check(same && guards, name + ": exact buffer too small: main part still identical, exact part not written " + why);
    }
    // decode quant's message (the stored one, else this encoder's, checked above)
    Msg q = wmain.stored ? Msg{wmain.bytes, wexact.bytes} : mine;
    msgs[name] = q;
    std::vector<int> targets = {c.dtype};
    if (c.dtype == ZCCL_FLOAT32) targets = {ZCCL_FLOAT32, ZCCL_BFLOAT16, ZCCL_FLOAT16};
    struct D {
      const char* tag;
      size_t main, exact, dst;
    };
    std::vector<D> ds = {{"", 0, 0, 0}};
    if (!opt.quick) ds.push_back({" [misaligned]", 1, 3, 2});
    for (int t : targets) {
      const Want w = want_of(g, name + "/dec/" + std::to_string(t));
      for (const D& d : ds) {
        Bytes out;
        bool guard = false;
        const zccl_status st = decode(q, t, c.n, d.main, d.exact, d.dst, nullptr, false, &out, &guard);
        const std::string what = name + d.tag + ": decode into dtype " + std::to_string(t);
        check(st == ZCCL_OK, what + ": status " + status_text(st));
        std::string why;
        const bool same = matches(w, out.data(), out.size(), &why);
        check(same && guard, what + ": identical to quant.Decode " + why);
      }
    }
    const Want wa = want_of(g, name + "/acc");
    for (const D& d : ds) {
      Bytes out;
      bool guard = false;
      const zccl_status st = decode(q, 0, c.n, d.main, d.exact, d.dst == 0 ? 0 : 4, nullptr, true, &out, &guard);
      const std::string what = name + d.tag + ": accumulate (first)";
      check(st == ZCCL_OK, what + ": status " + status_text(st));
      std::string why;
      const bool same = matches(wa, out.data(), out.size(), &why);
      check(same && guard, what + ": identical to quant.Accumulate " + why);
    }
  }

  void run_chain(const std::string& name, const std::map<std::string, Msg>& msgs) {
    auto m = golden::parse_meta(g.at(name + "/meta"));
    const int64_t n = std::stoll(m["n"]);
    const std::vector<std::string> names = golden::split(m["msgs"], ',');
    for (bool first : {false, true}) {
      Bytes acc = g.at(name + "/init");
      bool ok = true;
      for (size_t i = 0; i < names.size() && ok; i++) {
        auto it = msgs.find(names[i]);
        if (it == msgs.end()) {
          check(false, name + ": message " + names[i] + " missing");
          return;
        }
        Bytes out;
        bool guard = false;
        const zccl_status st = decode(it->second, 0, n, 0, 0, i % 2 ? 4 : 0, &acc, first && i == 0, &out, &guard);
        ok = st == ZCCL_OK && guard;
        if (!ok) check(false, name + ": accumulate " + names[i] + ": status " + status_text(st));
        acc = out;
      }
      std::string why;
      const std::string tag = first ? "out_first" : "out";
      const bool same = ok && matches(want_of(g, name + "/" + tag), acc.data(), acc.size(), &why);
      check(same,
            name + ": " + std::to_string(names.size()) + " messages folded" + (first ? " (first)" : "") +
                " identical to quant.Accumulate's " + why);
    }
  }

  void run_corruptions(const std::map<std::string, Msg>& msgs) {
    std::string text(g.at("corrupt").begin(), g.at("corrupt").end());
    int total = 0, agree = 0, k = 0;
    for (const std::string& line : golden::split(text, '\n')) {
      if (line.empty()) continue;
      auto m = golden::parse_meta(Bytes(line.begin(), line.end()));
      const std::string cname = m["case"];
      if (!opt.filter.empty() && cname.find(opt.filter) == std::string::npos) continue;
      if (opt.quick && k++ % 8 != 0) continue;
      auto it = msgs.find(cname);
      if (it == msgs.end()) continue;
      auto meta = golden::parse_meta(g.at(cname + "/meta"));
      const int dt = std::stoi(meta["dtype"]);
      const int64_t n = std::stoll(meta["n"]);
      Msg bad = it->second;
      Bytes& part = m["part"] == "exact" ? bad.exact : bad.main;
      const size_t pos = std::stoull(m["pos"]);
      const int64_t val = std::stoll(m["val"]);
      if (m["kind"] == "xor") {
        part[pos] ^= (uint8_t)val;
      } else if (m["kind"] == "set32") {
        zc::put_u32(&part[pos], (uint32_t)val);
      } else if (val < 0) {
        part.resize(part.size() - (size_t)(-val));
      } else {
        part.resize(part.size() + (size_t)val, 0);
      }
      for (int op = 0; op < 2; op++) {
        Bytes out;
        bool guard = false;
        const zccl_status st = decode(bad, op == 0 ? dt : 0, n, 0, 0, 0, nullptr, true, &out, &guard);
        const std::string go = m[op == 0 ? "dec" : "acc"];
        const uint32_t go_crc = (uint32_t)std::stoull(m[op == 0 ? "deccrc" : "acccrc"]);
        total++;
        const bool rejected = st == ZCCL_ERR_CORRUPT || st == ZCCL_ERR_SIZE || st == ZCCL_ERR_DTYPE;
        if ((go == "ok") == (st == ZCCL_OK)) agree++;
        const std::string what = std::string(op == 0 ? "decode" : "accumulate") + " of " + line + ": status " +
                                 status_text(st);
        if (go == "ok") {
          check(st == ZCCL_OK && crc(out.data(), out.size()) == go_crc && guard, what + ": accepted, output identical");
        } else {
          check(rejected && guard, what + ": rejected as quant rejects it");
        }
      }
    }
    printf("     lossy corruptions: %d verdicts, identical to quant's for %d\n", total, agree);
  }

  // Requests that do not fit the message: another element count, a dtype
  // it cannot be decoded into. quant says corrupt; the C API says which.
  void run_mismatch(const std::map<std::string, Msg>& msgs) {
    auto it = msgs.find("mix_bf16_int4");
    if (it == msgs.end()) return;
    Bytes out;
    bool guard;
    check(decode(it->second, ZCCL_BFLOAT16, 420, 0, 0, 0, nullptr, false, &out, &guard) == ZCCL_ERR_SIZE,
          "mix_bf16_int4: decoded as 420 elements: size mismatch");
    check(decode(it->second, 0, 422, 0, 0, 0, nullptr, true, &out, &guard) == ZCCL_ERR_SIZE,
          "mix_bf16_int4: accumulated as 422 elements: size mismatch");
    check(decode(it->second, ZCCL_FLOAT32, 421, 0, 0, 0, nullptr, false, &out, &guard) == ZCCL_ERR_DTYPE,
          "mix_bf16_int4: decoded into float32: dtype mismatch");
    check(decode(it->second, ZCCL_FLOAT16, 421, 0, 0, 0, nullptr, false, &out, &guard) == ZCCL_ERR_DTYPE,
          "mix_bf16_int4: decoded into float16: dtype mismatch");
  }

  // Arguments the C API refuses before launching anything.
  void run_api() {
    check(zccl_quant_main_len(ZCCL_QUANT_INT8, 100, 2048) == 24 + 4 + 100, "quant api: main length int8");
    check(zccl_quant_main_len(ZCCL_QUANT_INT4, 101, 32) == 24 + 4 * 4 + 51, "quant api: main length int4, odd count");
    check(zccl_quant_main_len(ZCCL_QUANT_FP8, 100, 32) == 24 + 8 * 4 + 4 * 32, "quant api: main length fp8, short tail");
    check(zccl_quant_main_len(ZCCL_QUANT_FP8, 100, 2048) == -1, "quant api: fp8 block 2048 has no length");
    check(zccl_quant_main_len(4, 100, 256) == -1, "quant api: mode 4 has no length");
    for (int b : {0, 16, 48, 2047, 131072}) check(zccl_quant_main_len(1, 100, b) == -1, "quant api: block " + std::to_string(b));
    check(zccl_quant_workspace_size(-1) == -1, "quant api: negative count");
    const int64_t n = 100, wsn = zccl_quant_workspace_size(n);
    Buf src(400), main(1024), exact(400), lens(8), ws((size_t)wsn);
    auto enc = [&](int dt, int mode, int block, int64_t ws_size) {
      return zccl_quant_encode(ctx, dt, mode, block, src.p, n, main.p, exact.p, 400, (int64_t*)lens.p, ws.p, ws_size,
                               nullptr, ZCCL_FLAG_SYNC);
    };
    check(enc(ZCCL_FLOAT8_E4M3FN, 1, 2048, wsn) == ZCCL_ERR_UNSUPPORTED, "quant api: float8 is not coded lossily");
    check(enc(ZCCL_FLOAT32, 0, 2048, wsn) == ZCCL_ERR_INVALID, "quant api: mode 0 refused");
    check(enc(ZCCL_FLOAT32, 1, 1000, wsn) == ZCCL_ERR_INVALID, "quant api: block 1000 refused");
    check(enc(ZCCL_FLOAT32, ZCCL_QUANT_FP8, 2048, wsn) == ZCCL_ERR_INVALID, "quant api: fp8 block 2048 refused");
    check(enc(ZCCL_FLOAT32, 1, 2048, wsn - 1) == ZCCL_ERR_NOMEM, "quant api: small workspace refused");
    check(zccl_quant_decode(ctx, main.p, 128, exact.p, 0, ZCCL_FLOAT8_E5M2, n, src.p, ws.p, wsn, nullptr, 0) ==
              ZCCL_ERR_UNSUPPORTED,
          "quant api: no decode into float8");
    check(zccl_quant_decode(ctx, nullptr, 128, exact.p, 0, ZCCL_FLOAT32, n, src.p, ws.p, wsn, nullptr, 0) == ZCCL_ERR_INVALID,
          "quant api: NULL main part refused");
    check(zccl_quant_accumulate(ctx, main.p, 128, exact.p, -1, n, (float*)src.p, 0, ws.p, wsn, nullptr, 0) ==
              ZCCL_ERR_INVALID,
          "quant api: negative exact length refused");
    // a main part shorter than a header is a corrupt message (kernel-side)
    check(zccl_quant_decode(ctx, main.p, 10, nullptr, 0, ZCCL_FLOAT32, n, src.p, ws.p, wsn, nullptr, ZCCL_FLAG_SYNC) ==
              ZCCL_ERR_CORRUPT,
          "quant api: 10-byte main part is corrupt");
  }
};

}  // namespace

void run_quant_tests(zccl_ctx* ctx, const std::string& path, const QuantTestOptions& opt, const Check& check) {
  const Golden g = golden::load(path);
  Runner r{ctx, g, opt, check};
  if (opt.filter.empty() || std::string("quant api").find(opt.filter) != std::string::npos) {
    r.run_api();
  }
  std::map<std::string, Msg> msgs;
  for (const auto& kv : g) {
    const std::string& key = kv.first;
    if (key.size() < 5 || key.compare(key.size() - 5, 5, "/meta") != 0) continue;
    const std::string name = key.substr(0, key.size() - 5);
    if (name.compare(0, 6, "chain_") == 0) continue;
    const bool chained = name.compare(0, 4, "mix_") == 0 || name.compare(0, 6, "b2048_") == 0;
    if (!opt.filter.empty() && name.find(opt.filter) == std::string::npos && !(chained && std::string("chain").find(opt.filter) == 0))
      continue;
    r.run_case(name, msgs);
  }
  for (const auto& kv : g) {
    const std::string& key = kv.first;
    if (key.compare(0, 6, "chain_") != 0 || key.size() < 5 || key.compare(key.size() - 5, 5, "/meta") != 0) continue;
    const std::string name = key.substr(0, key.size() - 5);
    if (!opt.filter.empty() && name.find(opt.filter) == std::string::npos) continue;
    r.run_chain(name, msgs);
  }
  r.run_corruptions(msgs);
  r.run_mismatch(msgs);
}
