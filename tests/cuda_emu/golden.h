// golden.h: reads tests/cuda_emu/golden/golden.bin (written by
// backend/codec/cuda_golden_test.go) and regenerates the inputs with the same
// integer-only generator as the Go side (cudaGenerate).
#pragma once

#include <stdint.h>
#include <stdio.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace golden {

using Bytes = std::vector<uint8_t>;

inline std::map<std::string, Bytes> load(const std::string& path) {
  std::map<std::string, Bytes> out;
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path.c_str());
    exit(2);
  }
  Bytes all;
  uint8_t buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) all.insert(all.end(), buf, buf + n);
  fclose(f);
  if (all.size() < 8 || memcmp(all.data(), "ZCGOLD1\n", 8) != 0) {
    fprintf(stderr, "%s: not a golden file\n", path.c_str());
    exit(2);
  }
  size_t p = 8;
  while (p < all.size()) {
    if (p + 2 > all.size()) break;
    size_t nl = all[p] | all[p + 1] << 8;
    p += 2;
    std::string name((const char*)&all[p], nl);
    p += nl;
    uint64_t l = 0;
    for (int k = 0; k < 8; k++) l |= (uint64_t)all[p + k] << (8 * k);
    p += 8;
    if (p + l > all.size()) {
      fprintf(stderr, "%s: truncated record %s\n", path.c_str(), name.c_str());
      exit(2);
    }
    out[name] = Bytes(all.begin() + (long)p, all.begin() + (long)(p + l));
    p += l;
  }
  return out;
}

inline std::map<std::string, std::string> parse_meta(const Bytes& b) {
  std::map<std::string, std::string> m;
  std::istringstream in(std::string(b.begin(), b.end()));
  std::string kv;
  while (in >> kv) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

struct Splitmix {
  uint64_t s;
  uint64_t next() {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

inline void layout(int dtype, int* size, unsigned* shift, unsigned* bits) {
  switch (dtype) {
    case 3: *size = 2, *shift = 7, *bits = 8; return;
    case 1: *size = 4, *shift = 23, *bits = 8; return;
    case 4: *size = 2, *shift = 10, *bits = 5; return;
    case 12: *size = 1, *shift = 2, *bits = 5; return;
    case 11: *size = 1, *shift = 3, *bits = 4; return;
  }
  fprintf(stderr, "golden: dtype %d\n", dtype);
  exit(2);
}

// The C++ twin of cudaGenerate in backend/codec/cuda_golden_test.go.
inline Bytes generate(int dtype, const std::string& spec, int64_t n, uint64_t seed) {
  int size;
  unsigned shift, bits;
  layout(dtype, &size, &shift, &bits);
  const int64_t maxf = ((int64_t)1 << bits) - 1;
  const uint64_t mant_mask = ((uint64_t)1 << shift) - 1;
  const unsigned sign_bit = shift + bits;
  std::string name = spec, arg;
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    name = spec.substr(0, colon);
    arg = spec.substr(colon + 1);
  }
  int64_t center = arg.empty() ? 0 : std::stoll(arg);
  Splitmix r{seed};
  auto clamp = [&](int64_t f) -> uint64_t { return (uint64_t)(f < 0 ? 0 : (f > maxf ? maxf : f)); };
  const uint64_t const_val = r.next();
  Bytes out((size_t)(n * size));
  for (int64_t i = 0; i < n; i++) {
    uint64_t x = r.next();
    uint64_t sign = x & 1;
    uint64_t mant = (x >> 32) & mant_mask;
    uint64_t field = 0;
    if (name == "gauss" || name == "sparse" || name == "special") {
      int64_t noise = (int64_t)((x >> 8) % 3 + (x >> 16) % 3 + (x >> 24) % 3 + (x >> 28) % 3) - 4;
      field = clamp(center + noise);
    } else if (name == "wide") {
      int64_t noise = (int64_t)((x >> 8) % 7 + (x >> 16) % 7 + (x >> 24) % 7) - 9;
      field = clamp(center + noise);
    } else if (name == "tight") {
      int64_t noise = (int64_t)((x >> 8) % 4 + (x >> 16) % 4) - 3;
      field = clamp(center + noise);
    }
    uint64_t v = sign << sign_bit | field << shift | mant;
    if (name == "sparse") {
      if ((x >> 40) % 10 < 3) v = sign << sign_bit;
    } else if (name == "special") {
      if ((x >> 40) % 100 < 4) {
        switch ((x >> 48) % 6) {
          case 0: v = sign << sign_bit; break;
          case 1: v = sign << sign_bit | (uint64_t)maxf << shift; break;
          case 2: v = sign << sign_bit | (uint64_t)maxf << shift | (mant | 1); break;
          case 3: v = sign << sign_bit | mant; break;
          case 4: v = sign << sign_bit | ((x >> 56) & (uint64_t)maxf) << shift | mant; break;
          case 5: v = sign << sign_bit | (uint64_t)(maxf - 1) << shift | mant; break;
        }
      }
    } else if (name == "random") {
      v = x;
    } else if (name == "const") {
      v = const_val;
    } else if (name != "gauss" && name != "tight" && name != "wide") {
      fprintf(stderr, "golden: unknown distribution %s\n", spec.c_str());
      exit(2);
    }
    for (int b = 0; b < size; b++) out[(size_t)(i * size + b)] = (uint8_t)(v >> (8 * b));
  }
  return out;
}

}  // namespace golden
