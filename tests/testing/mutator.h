// Seeded byte-string mutation for the fuzz tests under tests/fuzz/: deterministic for a
// given seed, so a failure names the seed and the iteration that reproduce it. Each call
// applies 1..4 of: flip a bit, set a byte to a random or boundary value (0x00, 0x01,
// 0x7f, 0x80, 0xff), insert / erase / duplicate a range, truncate, append random bytes,
// overwrite 4 or 8 bytes with a boundary integer (0, 1, max, max/2+1, a random value).
// Header-only; thread-compatible.
#ifndef KVTIER_TESTS_TESTING_MUTATOR_H_
#define KVTIER_TESTS_TESTING_MUTATOR_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace kvtier::testing {

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  // Returns a mutation of `in` (possibly empty or longer than `in`).
  std::string Mutate(std::string in) {
    const int steps = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < steps; ++i) MutateOnce(in);
    return in;
  }

  // Uniform in [0, n); 0 when n == 0.
  uint64_t Below(uint64_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }

  std::mt19937& rng() { return rng_; }

 private:
  void MutateOnce(std::string& s) {
    static constexpr uint8_t kBoundaryBytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    switch (Below(9)) {
      case 0:  // flip a bit
        if (!s.empty()) s[Below(s.size())] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // random byte
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(rng_());
        break;
      case 2:  // boundary byte
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(kBoundaryBytes[Below(5)]);
        break;
      case 3: {  // insert random bytes
        std::string ins(1 + Below(16), '\0');
        for (char& c : ins) c = static_cast<char>(rng_());
        s.insert(Below(s.size() + 1), ins);
        break;
      }
      case 4:  // erase a range
        if (!s.empty()) {
          const size_t at = Below(s.size());
          s.erase(at, 1 + Below(std::min<size_t>(32, s.size() - at)));
        }
        break;
      case 5:  // duplicate a range
        if (!s.empty()) {
          const size_t at = Below(s.size());
          const std::string piece = s.substr(at, 1 + Below(32));
          s.insert(Below(s.size() + 1), piece);
        }
        break;
      case 6:  // truncate
        s.resize(Below(s.size() + 1));
        break;
      case 7: {  // append random bytes
        const size_t n = 1 + Below(64);
        for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(rng_()));
        break;
      }
      default: {  // boundary integer, 4 or 8 bytes little-endian
        const size_t width = Below(2) == 0 ? 4 : 8;
        if (s.size() < width) break;
        const uint64_t max = width == 4 ? 0xffffffffull : ~0ull;
        const uint64_t values[] = {0, 1, max, max / 2 + 1,
                                   std::uniform_int_distribution<uint64_t>(0, max)(rng_)};
        const uint64_t v = values[Below(5)];
        std::memcpy(s.data() + Below(s.size() - width + 1), &v, width);
        break;
      }
    }
  }

  std::mt19937 rng_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_MUTATOR_H_
