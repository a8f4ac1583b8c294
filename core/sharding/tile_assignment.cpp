#include "core/sharding/tile_assignment.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace shardscope {

std::optional<int64_t> CheckedProduct(const std::vector<int64_t>& dims, int64_t limit) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d == 0) return int64_t{0};
  }
  for (int64_t d : dims) {
    if (product > limit / d) return std::nullopt;
    product *= d;
  }
  if (product > limit) return std::nullopt;
  return product;
}

bool IsPermutation(const std::vector<int64_t>& perm) {
  if (perm.size() <= 64) {  // every tile assignment's rank: a bit mask, no allocation
    uint64_t seen = 0;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || (seen >> p & 1)) return false;
      seen |= uint64_t{1} << p;
    }
    return true;
  }
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

std::vector<int64_t> MaterializeIota(const IotaForm& form) {
  const auto& r = form.reshape_dims;
  auto n = CheckedProduct(r);
  if (!n) return {};
  std::vector<int64_t> perm = form.perm;
  if (perm.empty()) {
    perm.resize(r.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  if (perm.size() != r.size() || !IsPermutation(perm)) return {};
  const size_t k = r.size();
  // Row-major strides of the source (un-transposed) array.
  std::vector<int64_t> src_stride(k, 1);
  for (size_t i = k; i-- > 1;) src_stride[i - 1] = src_stride[i] * r[i];
  // Output dim i walks source dim perm[i].
  std::vector<int64_t> out_dims(k), out_stride(k);
  for (size_t i = 0; i < k; ++i) {
    out_dims[i] = r[static_cast<size_t>(perm[i])];
    out_stride[i] = src_stride[static_cast<size_t>(perm[i])];
  }
  std::vector<int64_t> result;
  result.reserve(static_cast<size_t>(*n));
  if (*n == 0) return result;
  std::vector<int64_t> idx(k, 0);
  int64_t value = 0;
  for (int64_t count = 0; count < *n; ++count) {
    result.push_back(value);
    for (size_t i = k; i-- > 0;) {
      ++idx[i];
      value += out_stride[i];
      if (idx[i] < out_dims[i]) break;
      value -= out_stride[i] * idx[i];
      idx[i] = 0;
    }
  }
  return result;
}

IotaForm CanonicalIota(const IotaForm& form) {
  std::vector<int64_t> r = form.reshape_dims;
  std::vector<int64_t> perm = form.perm;
  if (perm.empty()) {
    perm.resize(r.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  if (perm.size() != r.size() || !IsPermutation(perm)) {
    auto n = CheckedProduct(r);
    return IotaForm{{n.value_or(0)}, {}};
  }
  // Drop size-1 dims.
  {
    std::vector<int64_t> new_index(r.size(), -1);
    std::vector<int64_t> nr;
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] != 1) {
        new_index[i] = static_cast<int64_t>(nr.size());
        nr.push_back(r[i]);
      }
    }
    std::vector<int64_t> np;
    for (int64_t p : perm) {
      if (new_index[static_cast<size_t>(p)] >= 0) np.push_back(new_index[static_cast<size_t>(p)]);
    }
    r = std::move(nr);
    perm = std::move(np);
  }
  // Merge source dims p, p+1 that stay adjacent (in that order) in the output.
  bool merged = true;
  while (merged) {
    merged = false;
    for (size_t i = 0; i + 1 < perm.size(); ++i) {
      if (perm[i + 1] == perm[i] + 1) {
        const int64_t a = perm[i];
        r[static_cast<size_t>(a)] *= r[static_cast<size_t>(a + 1)];
        r.erase(r.begin() + a + 1);
        perm.erase(perm.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        for (int64_t& p : perm) {
          if (p > a) --p;
        }
        merged = true;
        break;
      }
    }
  }
  if (r.empty()) return IotaForm{{1}, {}};
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) {
    int64_t n = 1;
    for (int64_t d : r) n *= d;
    return IotaForm{{n}, {}};
  }
  return IotaForm{r, perm};
}

bool IsCanonicalIota(const IotaForm& form) {
  const std::vector<int64_t>& r = form.reshape_dims;
  const std::vector<int64_t>& perm = form.perm;
  if (perm.empty()) return r.size() == 1;
  if (perm.size() != r.size() || r.size() < 2 || !IsPermutation(perm)) return false;
  for (int64_t d : r)
    if (d == 1) return false;
  for (size_t i = 0; i + 1 < perm.size(); ++i)
    if (perm[i + 1] == perm[i] + 1) return false;  // would merge (an identity perm merges whole)
  return true;
}

std::optional<IotaForm> DetectIota(const std::vector<int64_t>& devices) {
  const int64_t n = static_cast<int64_t>(devices.size());
  if (n == 0 || devices[0] != 0) return std::nullopt;
  if (n == 1) return IotaForm{{1}, {}};
  struct Digit {
    int64_t size;
    int64_t stride;
  };
  std::vector<Digit> digits;  // minor first
  int64_t block = 1;
  while (block < n) {
    const int64_t stride = devices[static_cast<size_t>(block)] - devices[0];
    if (stride <= 0) return std::nullopt;
    int64_t k = 1;
    while (block * (k + 1) <= n &&
           devices[static_cast<size_t>(block * k)] == devices[0] + k * stride) {
      ++k;
    }
    const int64_t rest = n / block;
    while (k > 1 && rest % k != 0) --k;
    if (k < 2) return std::nullopt;
    digits.push_back({k, stride});
    block *= k;
  }
  // The strides, sorted, must be exactly the row-major strides of the reshape dims.
  std::vector<size_t> by_stride(digits.size());
  std::iota(by_stride.begin(), by_stride.end(), 0);
  std::sort(by_stride.begin(), by_stride.end(),
            [&](size_t a, size_t b) { return digits[a].stride < digits[b].stride; });
  int64_t expected = 1;
  for (size_t i : by_stride) {
    if (digits[i].stride != expected) return std::nullopt;
    expected *= digits[i].size;
  }
  // Reshape dims: major (largest stride) first.
  const size_t k = digits.size();
  std::vector<int64_t> reshape(k);
  std::vector<int64_t> position_of_digit(k);
  for (size_t j = 0; j < k; ++j) {
    const size_t digit = by_stride[k - 1 - j];
    reshape[j] = digits[digit].size;
    position_of_digit[digit] = static_cast<int64_t>(j);
  }
  // Output dims: the last discovered digit is the most major.
  std::vector<int64_t> perm(k);
  for (size_t i = 0; i < k; ++i) perm[i] = position_of_digit[k - 1 - i];
  IotaForm form = CanonicalIota(IotaForm{reshape, perm});
  if (*SharedIotaTables(form).devices != devices) return std::nullopt;
  return form;
}

std::vector<int64_t> BuildDeviceIndex(const std::vector<int64_t>& devices) {
  int64_t max_id = -1;
  for (int64_t d : devices) {
    if (d < 0) return {};
    max_id = std::max(max_id, d);
  }
  if (max_id < 0 || max_id >= 4 * static_cast<int64_t>(devices.size()) + 1024) return {};
  std::vector<int64_t> index(static_cast<size_t>(max_id + 1), -1);
  for (size_t i = 0; i < devices.size(); ++i) {
    int64_t& slot = index[static_cast<size_t>(devices[i])];
    if (slot < 0) slot = static_cast<int64_t>(i);
  }
  return index;
}

namespace {
// Orders iota forms by (reshape dims, perm), also against a form not copied into a key (a lookup
// that finds the form, as nearly all do, allocates nothing).
struct IotaFormLess {
  using is_transparent = void;
  using Key = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  static bool Less(const std::vector<int64_t>& ar, const std::vector<int64_t>& ap, const std::vector<int64_t>& br,
                   const std::vector<int64_t>& bp) {
    return ar != br ? ar < br : ap < bp;
  }
  bool operator()(const Key& a, const Key& b) const { return Less(a.first, a.second, b.first, b.second); }
  bool operator()(const Key& a, const IotaForm& b) const { return Less(a.first, a.second, b.reshape_dims, b.perm); }
  bool operator()(const IotaForm& a, const Key& b) const { return Less(a.reshape_dims, a.perm, b.first, b.second); }
};
}  // namespace

IotaTables SharedIotaTables(const IotaForm& canonical) {
  thread_local std::map<IotaFormLess::Key, IotaTables, IotaFormLess> cache;
  thread_local size_t cached_devices = 0;
  if (auto it = cache.find(canonical); it != cache.end()) return it->second;
  auto key = std::make_pair(canonical.reshape_dims, canonical.perm);
  IotaTables t;
  t.devices = std::make_shared<const std::vector<int64_t>>(MaterializeIota(canonical));
  t.index = std::make_shared<const std::vector<int64_t>>(BuildDeviceIndex(*t.devices));
  // Bounded: at most 256 forms and about 2^22 device ids (64 MiB with the indexes) per thread.
  if (cache.size() >= 256 || cached_devices + t.devices->size() > (size_t{1} << 22)) {
    cache.clear();
    cached_devices = 0;
  }
  cached_devices += t.devices->size();
  cache.emplace(std::move(key), t);
  return t;
}

std::string_view SubgroupTypeName(HloSharding::SubgroupType t) {
  switch (t) {
    case HloSharding::SubgroupType::kReplicated: return "replicated";
    case HloSharding::SubgroupType::kManual: return "manual";
    case HloSharding::SubgroupType::kUnreduced: return "unreduced";
    case HloSharding::SubgroupType::kMaximal: return "maximal";
  }
  return "unknown";
}

int SubgroupTypeRank(HloSharding::SubgroupType t) {
  switch (t) {
    case HloSharding::SubgroupType::kMaximal: return 0;
    case HloSharding::SubgroupType::kManual: return 1;
    case HloSharding::SubgroupType::kUnreduced: return 2;
    case HloSharding::SubgroupType::kReplicated: return 3;
  }
  return 4;
}

}  // namespace shardscope
