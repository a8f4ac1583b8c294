// A set of positions (post-order indices within one computation), scanned in order: the worklists
// of the propagation engine's fixed point (engine.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace shardscope::prop {

class PendingSet {
 public:
  void Reset(size_t n) {
    n_ = n;
    words_.assign((n + 63) / 64, 0);
  }
  void Set(size_t i) { words_[i >> 6] |= (uint64_t{1} << (i & 63)); }
  void Clear(size_t i) { words_[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  // Smallest set position >= i, or npos.
  size_t NextFrom(size_t i) const {
    if (i >= n_) return npos;
    size_t w = i >> 6;
    uint64_t bits = words_[w] & (~uint64_t{0} << (i & 63));
    while (true) {
      if (bits) {
        const size_t r = (w << 6) + static_cast<size_t>(__builtin_ctzll(bits));
        return r < n_ ? r : npos;
      }
      if (++w >= words_.size()) return npos;
      bits = words_[w];
    }
  }
  // Largest set position <= i, or npos.
  size_t PrevFrom(size_t i) const {
    if (n_ == 0) return npos;
    if (i >= n_) i = n_ - 1;
    size_t w = i >> 6;
    const unsigned shift = 63 - static_cast<unsigned>(i & 63);
    uint64_t bits = words_[w] & (~uint64_t{0} >> shift);
    while (true) {
      if (bits) return (w << 6) + 63 - static_cast<size_t>(__builtin_clzll(bits));
      if (w == 0) return npos;
      bits = words_[--w];
    }
  }
  static constexpr size_t npos = std::numeric_limits<size_t>::max();

 private:
  size_t n_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace shardscope::prop
