// HloSharding: XLA text forms, normalisation, semantic equality, per-device view, error reporting,
// and a round trip of every sharding in the XLA conformance corpus (../shared/conformance/xla).
#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/shape.h"
#include "core/sharding/sharding.h"
#include "core/sharding/tile_assignment.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

// Parses or records a test failure (and returns Unknown so comparisons then fail loudly too).
HloSharding MustParse(const std::string& text, const char* file, int line) {
  auto r = HloSharding::Parse(text);
  if (!r.ok()) {
    QTest::qFail(qPrintable(QString::fromStdString("parse of " + text + " failed: " + r.error().message +
                                                   " at offset " + std::to_string(r.error().offset))),
                 file, line);
    return HloSharding::Unknown();
  }
  return *r;
}
#define PARSE(text) MustParse(text, __FILE__, __LINE__)

QString Q(const std::string& s) { return QString::fromStdString(s); }

std::vector<int64_t> V(std::initializer_list<int64_t> v) { return std::vector<int64_t>(v); }

// Brace-balanced text starting at `open` (which must be '{'), honouring quoted strings.
std::string BalancedAt(const std::string& text, size_t open) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return text.substr(open, i - open + 1);
  }
  return text.substr(open);
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every sharding text of the conformance corpus: sharding={...} in .hlo files, and the second column
// of .expect / .expect_if_output_prop files (NONE skipped).
std::vector<std::string> CorpusShardings(const std::filesystem::path& root, int* files) {
  std::vector<std::string> out;
  *files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if (ext == ".hlo") {
      ++*files;
      const std::string text = ReadFile(entry.path());
      const std::string key = "sharding={";
      for (size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + 1)) {
        out.push_back(BalancedAt(text, p + key.size() - 1));
      }
    } else if (ext == ".expect" || ext == ".expect_if_output_prop") {
      ++*files;
      std::istringstream lines(ReadFile(entry.path()));
      std::string line;
      while (std::getline(lines, line)) {
        const size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        std::string s = line.substr(tab + 1);
        while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
        if (s == "NONE" || s.empty()) continue;
        out.push_back(s);
      }
    }
  }
  return out;
}

}  // namespace

class TestSharding : public QObject {
  Q_OBJECT

 private slots:
  void simpleKinds() {
    QCOMPARE(Q(PARSE("{replicated}").ToString()), QString("{replicated}"));
    QVERIFY(PARSE("{replicated}").IsReplicated());
    QVERIFY(PARSE("{manual}").IsManual());
    QVERIFY(PARSE("{unknown}").IsUnknown());
    QCOMPARE(PARSE("{unreduced}").kind(), HloSharding::Kind::kUnreduced);
    const HloSharding maximal = PARSE("{maximal device=3}");
    QVERIFY(maximal.IsMaximal());
    QCOMPARE(maximal.maximal_device(), int64_t{3});
    QCOMPARE(Q(maximal.ToString()), QString("{maximal device=3}"));
    QVERIFY(maximal.IsTileMaximal());
    QVERIFY(PARSE("{maximal device=3}") != PARSE("{maximal device=2}"));
    QVERIFY(PARSE("{manual}") != PARSE("{replicated}"));
    QCOMPARE(HloSharding().kind(), HloSharding::Kind::kReplicated);
    // Whitespace, newlines and /*index=N*/ comments are insignificant.
    QCOMPARE(Q(PARSE("{\n    devices=[2,1,1,1,4]<=[8] last_tile_dim_replicate}").ToString()),
             QString("{devices=[2,1,1,1,4]<=[8] last_tile_dim_replicate}"));
    QCOMPARE(Q(PARSE("{devices=[1,4] 0,1,2,3 }").ToString()), QString("{devices=[1,4]0,1,2,3}"));
  }

  void tiledExplicitAndIota() {
    const HloSharding explicit_tiles = PARSE("{devices=[2,2]0,1,2,3}");
    QVERIFY(explicit_tiles.IsTiled());
    QCOMPARE(explicit_tiles.TiledDataRank(), int64_t{2});
    QCOMPARE(explicit_tiles.NumTiles(), int64_t{4});
    QCOMPARE(explicit_tiles.NumDevices(), int64_t{4});
    QCOMPARE(Q(explicit_tiles.ToString()), QString("{devices=[2,2]0,1,2,3}"));
    QVERIFY(!explicit_tiles.tile_assignment().is_iota());

    const HloSharding iota = PARSE("{devices=[4,2]<=[8]}");
    QVERIFY(iota.tile_assignment().is_iota());
    QCOMPARE(Q(iota.ToString()), QString("{devices=[4,2]<=[8]}"));
    QCOMPARE(iota, PARSE("{devices=[4,2]0,1,2,3,4,5,6,7}"));

    const HloSharding transposed = PARSE("{devices=[4,2]<=[2,4]T(1,0)}");
    QCOMPARE(transposed.tile_assignment().devices(), V({0, 4, 1, 5, 2, 6, 3, 7}));
    QCOMPARE(Q(transposed.ToString()), QString("{devices=[4,2]<=[2,4]T(1,0)}"));
    QCOMPARE(transposed, PARSE("{devices=[4,2]0,4,1,5,2,6,3,7}"));
    QVERIFY(transposed != iota);
    QCOMPARE(transposed.tile_assignment()(V({1, 1})), int64_t{5});
    QCOMPARE(transposed.tile_assignment().IndexOfDevice(6), V({2, 1}));
    QVERIFY(transposed.tile_assignment().IndexOfDevice(8).empty());

    // 3-d transpose: iota over [2,2,2] with dims 1 and 2 swapped.
    QCOMPARE(PARSE("{devices=[2,2,2]<=[2,2,2]T(0,2,1)}").tile_assignment().devices(), V({0, 2, 1, 3, 4, 6, 5, 7}));
    // The iota description is canonicalised as XLA prints it: size-1 dims dropped, adjacent dims merged.
    QCOMPARE(Q(PARSE("{devices=[2]<=[2,1]T(1,0)}").ToString()), QString("{devices=[2]<=[2]}"));
    QCOMPARE(Q(PARSE("{devices=[8]<=[2,4]T(0,1)}").ToString()), QString("{devices=[8]<=[8]}"));
    QCOMPARE(Q(PARSE("{devices=[4,4]<=[2,2,4]T(2,0,1)}").ToString()), QString("{devices=[4,4]<=[4,4]T(1,0)}"));
    // Explicit lists that happen to be an iota still print explicitly (as written).
    QCOMPARE(Q(PARSE("{devices=[4]0,1,2,3}").ToString()), QString("{devices=[4]0,1,2,3}"));
    // A single device tiles nothing: replicated (as XLA's FromProto).
    QVERIFY(PARSE("{devices=[1,1]0}").IsReplicated());
    // Non-contiguous device ids are allowed.
    QCOMPARE(PARSE("{devices=[3]1,2,3}").tile_assignment().IndexOfDevice(3), V({2}));
  }

  // Transposing an iota tile assignment, and sorting its replication groups, find the result's
  // iota description without listing the devices (FactorIota in sharding.cpp). Over random iota descriptions, tile shapes and
  // permutations it must give the devices the listed transpose gives, and the description (so the
  // text) that detecting the iota in them gives; where the tile shape cuts a reshape dim unevenly
  // it lists them as before.
  void iotaTransposeMatchesTheListedOne() {
    std::mt19937 rng(7);
    const std::vector<int64_t> primes = {2, 2, 2, 3, 2, 5};
    int symbolic = 0, cases = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      // n from 2-5 prime factors; the reshape dims and the tile dims are two random groupings.
      std::vector<int64_t> f;
      const int nf = 2 + static_cast<int>(rng() % 4);
      for (int q = 0; q < nf; ++q) f.push_back(primes[rng() % primes.size()]);
      auto group = [&](std::vector<int64_t> fs) {
        std::shuffle(fs.begin(), fs.end(), rng);
        std::vector<int64_t> out;
        for (int64_t x : fs) {
          if (!out.empty() && rng() % 2) out.back() *= x;
          else out.push_back(x);
        }
        if (rng() % 4 == 0) out.insert(out.begin() + static_cast<std::ptrdiff_t>(rng() % (out.size() + 1)), 1);
        return out;
      };
      const std::vector<int64_t> reshape = group(f), dims = group(f);
      std::vector<int64_t> iperm(reshape.size()), perm(dims.size());
      std::iota(iperm.begin(), iperm.end(), 0);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(iperm.begin(), iperm.end(), rng);
      std::shuffle(perm.begin(), perm.end(), rng);
      const TileAssignment iota = TileAssignment::Iota(dims, reshape, iperm);
      QVERIFY(iota.is_iota());
      const TileAssignment listed = TileAssignment::Explicit(dims, iota.devices()).Transpose(perm);
      const TileAssignment t = iota.Transpose(perm);
      ++cases;
      QCOMPARE(t.dims(), listed.dims());
      QCOMPARE(t.devices(), listed.devices());
      if (auto form = DetectIota(listed.devices())) {
        QVERIFY(t.is_iota());
        QCOMPARE(Q(t.ToString()), Q(TileAssignment::Iota(listed.dims(), form->reshape_dims, form->perm).ToString()));
        ++symbolic;
      }
      // The last dim as replication groups: each group's devices sorted (PartialTile), again
      // found from the description.
      if (dims.size() >= 2) {
        const HloSharding partial = HloSharding::PartialTile(t);
        const HloSharding partial_listed = HloSharding::PartialTile(listed);
        QCOMPARE(partial.tile_assignment().devices(), partial_listed.tile_assignment().devices());
        if (auto form = DetectIota(partial_listed.tile_assignment().devices()); form && t.is_iota()) {
          QCOMPARE(Q(partial.tile_assignment().ToString()),
                   Q(TileAssignment::Iota(partial_listed.tile_assignment().dims(), form->reshape_dims, form->perm).ToString()));
        }
      }
    }
    QVERIFY(symbolic > cases / 2);
  }

  void tileAssignmentOperations() {
    TileAssignment t = TileAssignment::Iota({2, 4});
    TileAssignment tt = t.Transpose({1, 0});
    QCOMPARE(tt.dims(), V({4, 2}));
    QCOMPARE(tt.devices(), V({0, 4, 1, 5, 2, 6, 3, 7}));
    QVERIFY(tt.is_iota());
    QCOMPARE(Q(tt.ToString()), QString("[4,2]<=[2,4]T(1,0)"));
    QCOMPARE(Q(tt.Reshape({8}).ToString()), QString("[8]<=[2,4]T(1,0)"));
    TileAssignment e = TileAssignment::Explicit({2, 2}, {3, 1, 2, 0});
    QCOMPARE(e.Transpose({1, 0}).devices(), V({3, 2, 1, 0}));
    QVERIFY(!e.Transpose({1, 0}).is_iota());
    // Bad inputs leave the assignment unchanged instead of failing.
    QCOMPARE(e.Transpose({0, 0}), e);
    QCOMPARE(e.Reshape({3}), e);
    QCOMPARE(e(V({2, 0})), int64_t{-1});
    QCOMPARE(TileAssignment::Iota({4}, {2, 2}, {1, 0}).devices(), V({0, 2, 1, 3}));
    QCOMPARE(MaterializeIota({{2, 3}, {1, 0}}), V({0, 3, 1, 4, 2, 5}));
    auto detected = DetectIota({0, 3, 1, 4, 2, 5});
    QVERIFY(detected.has_value());
    QCOMPARE(detected->reshape_dims, V({2, 3}));
    QCOMPARE(detected->perm, V({1, 0}));
    QVERIFY(!DetectIota({0, 2, 1, 4, 3, 5}).has_value());
    QVERIFY(!DetectIota({1, 0}).has_value());
    // A copy shares the assignment; a reshape to the same dims is the same assignment.
    TileAssignment copy = tt;
    QCOMPARE(copy, tt);
    QCOMPARE(copy.devices().data(), tt.devices().data());
    QCOMPARE(tt.Reshape({4, 2}), tt);
    QCOMPARE(TileAssignment().Reshape({0}).dims(), V({0}));
    QVERIFY(TileAssignment().devices().empty());
    // IsCanonicalIota says exactly when CanonicalIota changes nothing: every form over up to four
    // reshape dims of sizes 1-3 and each of their permutations.
    int canonical = 0, forms = 0;
    for (int rank = 1; rank <= 4; ++rank) {
      std::vector<int64_t> sizes(static_cast<size_t>(rank), 1);
      for (bool more_sizes = true; more_sizes;) {
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        do {
          for (bool empty_perm : {false, true}) {
            const IotaForm form{sizes, empty_perm ? std::vector<int64_t>{} : perm};
            const IotaForm c = CanonicalIota(form);
            const bool unchanged = c.reshape_dims == form.reshape_dims && c.perm == form.perm;
            QVERIFY2(IsCanonicalIota(form) == unchanged, (Q(TileAssignment::Iota({CheckedProduct(sizes).value()}, sizes, form.perm).ToString())).toUtf8());
            QVERIFY(IsCanonicalIota(c));
            canonical += unchanged ? 1 : 0;
            ++forms;
          }
        } while (std::next_permutation(perm.begin(), perm.end()));
        more_sizes = false;
        for (auto& d : sizes) {
          if (d < 3) { ++d; more_sizes = true; break; }
          d = 1;
        }
      }
    }
    QVERIFY(forms > 2000);
    QVERIFY(canonical > 100);
  }

  void partialReplication() {
    const HloSharding partial = PARSE("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
    QVERIFY(partial.HasPartialReplication());
    QVERIFY(!partial.IsReplicated());
    QCOMPARE(partial.TiledDataRank(), int64_t{2});
    QCOMPARE(partial.NumTiles(), int64_t{2});
    QCOMPARE(partial.DimensionTiles(0), int64_t{2});
    QCOMPARE(partial.DimensionTiles(1), int64_t{1});
    QCOMPARE(partial.DimensionTiles(2), int64_t{1});
    QCOMPARE(partial.NumDevices(), int64_t{4});
    QCOMPARE(Q(partial.ToString()), QString("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"));
    QCOMPARE(partial, HloSharding::PartialTile(TileAssignment::Explicit({2, 1, 2}, {0, 1, 2, 3})));
    // Everything in one replication group: replicated.
    QVERIFY(PARSE("{devices=[1,1,4]<=[4] last_tile_dim_replicate}").IsReplicated());
    QCOMPARE(Q(PARSE("{devices=[1,1,4]<=[4] last_tile_dim_replicate}").ToString()), QString("{replicated}"));
    // A replication dim of 1 is a plain tiling.
    const HloSharding trivial = PARSE("{devices=[2,2,1]0,1,2,3 last_tile_dim_replicate}");
    QVERIFY(!trivial.HasPartialReplication());
    QCOMPARE(trivial, PARSE("{devices=[2,2]0,1,2,3}"));
    QCOMPARE(Q(trivial.ToString()), QString("{devices=[2,2]0,1,2,3}"));
    // Devices inside a replication group are sorted (XLA's PartialTile), so group order is irrelevant.
    QCOMPARE(Q(PARSE("{devices=[2,2]1,0,3,2 last_tile_dim_replicate}").ToString()),
             QString("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
    QCOMPARE(PARSE("{devices=[2,2]3,2,1,0 last_tile_dim_replicate}"),
             PARSE("{devices=[2,2]2,3,0,1 last_tile_dim_replicate}"));
    QVERIFY(PARSE("{devices=[2,2]3,2,1,0 last_tile_dim_replicate}") !=
            PARSE("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
    // Iota form survives the sort when still an iota.
    QCOMPARE(Q(PARSE("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}").ToString()),
             QString("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"));
  }

  void subgroupNormalisation() {
    // Types are ordered manual before replicated (XLA's HloSharding::Subgroup), with the devices
    // transposed accordingly.
    const HloSharding s = PARSE("{devices=[1,1,2,2]<=[4] last_tile_dims={replicated, manual}}");
    QCOMPARE(s.subgroup_types(), (std::vector<HloSharding::SubgroupType>{HloSharding::SubgroupType::kManual,
                                                                         HloSharding::SubgroupType::kReplicated}));
    QCOMPARE(s.tile_assignment().devices(), V({0, 2, 1, 3}));
    QCOMPARE(Q(s.ToString()), QString("{devices=[1,1,2,2]<=[2,2]T(1,0) last_tile_dims={manual, replicated}}"));
    QCOMPARE(s, PARSE("{devices=[1,1,2,2]0,2,1,3 last_tile_dims={manual,replicated}}"));
    QVERIFY(s.HasManualSubgroup());
    QVERIFY(s.HasPartialReplication());
    QCOMPARE(s.TiledDataRank(), int64_t{2});
    // Size-1 subgroup dims are dropped.
    QCOMPARE(Q(PARSE("{devices=[2,2,1]<=[4] last_tile_dims={manual, replicated}}").ToString()),
             QString("{devices=[2,2]<=[4] last_tile_dims={manual}}"));
    // Repeated types merge.
    QCOMPARE(Q(PARSE("{devices=[2,2,2]<=[8] last_tile_dims={replicated, replicated}}").ToString()),
             QString("{devices=[2,4]<=[8] last_tile_dim_replicate}"));
    // A single subgroup type with nothing tiled collapses to that kind.
    QVERIFY(PARSE("{devices=[1,4]<=[4] last_tile_dims={manual}}").IsManual());
    QCOMPARE(PARSE("{devices=[1,1,4]<=[4] last_tile_dims={unreduced}}").kind(), HloSharding::Kind::kUnreduced);
    QVERIFY(PARSE("{devices=[1,1,4]<=[4] last_tile_dims={replicated}}").IsReplicated());
    // last_tile_dims={replicated} is the same as last_tile_dim_replicate and prints as it.
    QCOMPARE(Q(PARSE("{devices=[2,2]<=[4] last_tile_dims={replicated}}").ToString()),
             QString("{devices=[2,2]<=[4] last_tile_dim_replicate}"));
    // Unreduced keeps its own subgroup.
    const HloSharding unreduced = PARSE("{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced}}");
    QCOMPARE(unreduced.subgroup_types(),
             (std::vector<HloSharding::SubgroupType>{HloSharding::SubgroupType::kUnreduced}));
    QVERIFY(!unreduced.HasPartialReplication());
    QCOMPARE(Q(unreduced.ToString()), QString("{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced}}"));
    // Mixed with nothing tiled stays a subgroup sharding.
    QCOMPARE(Q(PARSE("{devices=[2,2]<=[4] last_tile_dims={manual, replicated}}").ToString()),
             QString("{devices=[2,2]<=[4] last_tile_dims={manual, replicated}}"));
    // Constructed through the API.
    const HloSharding api = HloSharding::Subgroup(TileAssignment::Iota({2, 1, 2}),
                                                  {HloSharding::SubgroupType::kReplicated});
    QCOMPARE(api, PARSE("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"));
    QVERIFY(HloSharding::Tile(TileAssignment::Iota({1, 1})).IsReplicated());
  }

  void tuples() {
    const HloSharding t = PARSE("{{replicated}, {devices=[2]0,1}}");
    QVERIFY(t.IsTuple());
    QCOMPARE(t.tuple_elements().size(), size_t{2});
    QVERIFY(t.tuple_elements()[0].IsReplicated());
    QCOMPARE(t.tuple_elements()[1].DimensionTiles(0), int64_t{2});
    QCOMPARE(Q(t.ToString()), QString("{{replicated}, {devices=[2]0,1}}"));
    QVERIFY(!t.IsReplicated());
    QVERIFY(!t.IsTileMaximal());
    QCOMPARE(t, PARSE("{{replicated},{devices=[2]<=[2]}}"));
    QVERIFY(t != PARSE("{{replicated}, {devices=[2]1,0}}"));
    QVERIFY(t != PARSE("{{replicated}, {devices=[2]0,1}, {replicated}}"));
    QVERIFY(PARSE("{{replicated},{replicated}}").IsReplicated());
    QVERIFY(PARSE("{{manual},{manual}}").IsManual());
    // One sharding written for a whole tuple equals the tuple of copies.
    QCOMPARE(PARSE("{replicated}"), PARSE("{{replicated}, {replicated}}"));
    QVERIFY(PARSE("{replicated}") != PARSE("{{replicated}, {manual}}"));
    // Empty tuple.
    const HloSharding empty = PARSE("{}");
    QVERIFY(empty.IsTuple());
    QVERIFY(empty.tuple_elements().empty());
    QCOMPARE(Q(empty.ToString()), QString("{}"));

    // Sub-shardings follow the leaves of the shape: (f32[4], (f32[8], s32[]), pred[]).
    const Shape shape = Shape::Tuple({Shape(PrimitiveType::kF32, {4}),
                                      Shape::Tuple({Shape(PrimitiveType::kF32, {8}), Shape::Scalar(PrimitiveType::kS32)}),
                                      Shape::Scalar(PrimitiveType::kPred)});
    const HloSharding four = PARSE("{{devices=[2]0,1}, {devices=[4]<=[4]}, {replicated}, {maximal device=1}}");
    QCOMPARE(four.GetSubSharding(shape, {0}), PARSE("{devices=[2]0,1}"));
    QCOMPARE(four.GetSubSharding(shape, {1}), PARSE("{{devices=[4]<=[4]}, {replicated}}"));
    QCOMPARE(four.GetSubSharding(shape, {1, 0}), PARSE("{devices=[4]<=[4]}"));
    QCOMPARE(four.GetSubSharding(shape, {2}), PARSE("{maximal device=1}"));
    QCOMPARE(PARSE("{manual}").GetSubSharding(shape, {1, 1}), PARSE("{manual}"));
    const HloSharding expanded = PARSE("{devices=[2]0,1}").ExpandToTuple(shape);
    QCOMPARE(expanded.tuple_elements().size(), size_t{4});
    QCOMPARE(expanded.tuple_elements()[3], PARSE("{devices=[2]0,1}"));
    // Bytes per device over a tuple: f32[4]/2 = 8, f32[8]/4 = 8, s32[] = 4, pred[] = 1.
    QCOMPARE(four.BytesPerDevice(shape), int64_t{8 + 8 + 4 + 1});

    // XLA prints an index comment every fifth element; it parses back.
    const HloSharding six = HloSharding::Tuple(std::vector<HloSharding>(6, HloSharding::Replicate()));
    QCOMPARE(Q(six.ToString()),
             QString("{{replicated}, {replicated}, {replicated}, {replicated}, {replicated}, /*index=5*/{replicated}}"));
    QCOMPARE(PARSE(six.ToString()), six);
  }

  void shardGroupsAndMetadata() {
    const HloSharding as = PARSE("{unknown shard_as 0}");
    QVERIFY(as.IsUnknown());
    QCOMPARE(as.shard_group_id(), std::optional<int64_t>(0));
    QVERIFY(as.shard_as());
    QCOMPARE(Q(as.ToString()), QString("{unknown shard_as 0}"));
    const HloSharding like = PARSE("{unknown shard_like 1}");
    QCOMPARE(like.shard_group_id(), std::optional<int64_t>(1));
    QVERIFY(!like.shard_as());
    QCOMPARE(Q(like.ToString()), QString("{unknown shard_like 1}"));
    QVERIFY(as != like);
    QVERIFY(as != PARSE("{unknown}"));
    QCOMPARE(Q(PARSE("{devices=[2]0,1 shard_as 3}").ToString()), QString("{devices=[2]0,1 shard_as 3}"));

    const HloSharding meta = PARSE("{replicated metadata={op_name=\"a\"}}");
    QCOMPARE(meta.metadata().size(), size_t{1});
    QCOMPARE(Q(meta.metadata()[0].text), QString("op_name=\"a\""));
    QCOMPARE(meta, PARSE("{replicated}"));  // metadata never compared
    QCOMPARE(meta, PARSE("{replicated metadata={op_name=\"b\"}}"));
    QCOMPARE(Q(meta.ToString()), QString("{replicated}"));
    QCOMPARE(Q(meta.ToString(true)), QString("{replicated metadata={op_name=\"a\"}}"));
    const HloSharding several =
        PARSE("{devices=[2,1]0,1 metadata={{op_name=\"a\"}, {op_name=\"b{c}\" source_line=3}}}");
    QCOMPARE(several.metadata().size(), size_t{2});
    QCOMPARE(Q(several.metadata()[1].text), QString("op_name=\"b{c}\" source_line=3"));
    QCOMPARE(Q(several.ToString(true)),
             QString("{devices=[2,1]0,1 metadata={{op_name=\"a\"}, {op_name=\"b{c}\" source_line=3}}}"));
    QCOMPARE(PARSE(several.ToString(true)).metadata().size(), size_t{2});
    // One entry whose own text starts with '{' (after blanks or a comment) is printed as a one-element
    // list: printed bare it would read back as two entries, or not at all (a fuzzing finding).
    for (const char* text : {"{replicated metadata={{{a}, x}}}", "{replicated metadata={{ /*c*/{a} }}}"}) {
      const HloSharding one = PARSE(text);
      QCOMPARE(one.metadata().size(), size_t{1});
      const std::string printed = one.ToString(true);
      const HloSharding again = PARSE(printed);
      QCOMPARE(again.metadata().size(), size_t{1});
      QCOMPARE(Q(again.metadata()[0].text), Q(one.metadata()[0].text));
      QCOMPARE(Q(again.ToString(true)), Q(printed));
    }
    QCOMPARE(Q(PARSE("{replicated metadata={{{a}, x}}}").ToString(true)),
             QString("{replicated metadata={{{a}, x}}}"));
    // One entry that is an open comment ("/*", closed in the source by a comment after the entry)
    // is printed as a one-element list: printed bare, its comment would run on to the tuple's
    // "/*index=5*/" and the entry would read back as the list form (a fuzzing finding in CI).
    const HloSharding open_comment = PARSE(
        "{{replicated metadata={/*} /**/}, {replicated}, {replicated}, {replicated}, {replicated}, {replicated}}");
    QCOMPARE(Q(open_comment.tuple_elements()[0].metadata()[0].text), QString("/*"));
    const std::string open_printed = open_comment.ToString(true);
    QCOMPARE(Q(open_printed), QString("{{replicated metadata={{/*}}}, {replicated}, {replicated}, {replicated}, "
                                      "{replicated}, /*index=5*/{replicated}}"));
    const HloSharding open_again = PARSE(open_printed);
    QCOMPARE(open_again.tuple_elements()[0].metadata().size(), size_t{1});
    QCOMPARE(Q(open_again.tuple_elements()[0].metadata()[0].text), QString("/*"));
    QCOMPARE(Q(open_again.ToString(true)), Q(open_printed));
    // A closed comment stays bare.
    QCOMPARE(Q(PARSE("{replicated metadata={/*c*/}}").ToString(true)), QString("{replicated metadata={/*c*/}}"));
  }

  void namedMeshForms() {
    struct Case {
      const char* named;
      const char* classic;
    };
    const Case cases[] = {
        {"{mesh['x'=2,'y'=2], [{'x'},{'y'}]}", "{devices=[2,2]<=[4]}"},
        {"{mesh['x'=2,'y'=2] [{'y'}, {'x'}]}", "{devices=[2,2]0,2,1,3}"},
        {"{mesh['x'=2,'y'=2] [{'x', 'y'}, {}]}", "{devices=[4,1]<=[4]}"},
        {"{mesh['x'=2,'y'=2] [{'x'}, {}], replicated={'y'}}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
        {"{mesh['x'=2,'y'=2] [{'y'}, {}]}", "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"},
        // device_ids give the mesh order [[3,2],[1,0]]; groups are then sorted.
        {"{mesh['x'=2,'y'=2], device_ids=(3,2,1,0), [{'x'}, {}], replicated={'y'}}",
         "{devices=[2,1,2]2,3,0,1 last_tile_dim_replicate}"},
        {"{mesh['x'=2,'y'=2,'z'=2] [{'x','z'},{'y'}]}", "{devices=[4,2]0,2,1,3,4,6,5,7}"},
        {"{mesh['x'=2,'y'=2,'z'=2] [{'z'}, {}, {'y'}, {}, {'x'}]}", "{devices=[2,1,2,1,2]<=[2,2,2]T(2,1,0)}"},
        {"{mesh['x'=2,'y'=2] [{?},{'x'}], unreduced={'y'}}", "{devices=[1,2,2]<=[4] last_tile_dims={unreduced}}"},
        {"{mesh['x'=2] [{},{}], unreduced={'x'}}", "{unreduced}"},
        {"{mesh['x'=2] []}", "{replicated}"},
        {"{mesh['a'=2, 'b'=2], [{'a', 'b'}, {}]}", "{devices=[4,1]<=[4]}"},
        // Sub-axes 'x':(pre)size: pre-size 1 is the major part of the axis.
        {"{mesh['x'=4] [{'x':(1)2}, {'x':(2)2}]}", "{devices=[2,2]<=[4]}"},
        {"{mesh['x'=4] [{'x':(2)2}, {'x':(1)2}]}", "{devices=[2,2]<=[2,2]T(1,0)}"},
        {"{mesh['x'=8] [{'x':(1)2}, {'x':(2)4}]}", "{devices=[2,4]<=[8]}"},
        {"{mesh['x'=8] [{'x':(1)2}, {'x':(4)2}]}", "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}"},
        {"{mesh['x'=8] [{'x':(1)2, 'x':(4)2}, {'x':(2)2}]}", "{devices=[4,2]0,2,1,3,4,6,5,7}"},
        {"{mesh['x'=8] [{'x':(1)2, 'x':(4)2}, {}]}", "{devices=[4,1,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}"},
    };
    for (const Case& c : cases) {
      const HloSharding named = PARSE(c.named);
      const HloSharding classic = PARSE(c.classic);
      if (named.open_dims().empty()) {
        QVERIFY2(named == classic, qPrintable(Q(std::string(c.named) + " -> " + named.ToString() +
                                                " (as classic: " + classic.ToString() + ")")));
      } else {
        QVERIFY(named != classic);  // open dims are part of the sharding
        HloSharding closed = named;
        closed.set_open_dims({});
        QVERIFY2(closed == classic, qPrintable(Q(std::string(c.named))));
      }
      // The named text is reprinted (canonically) and parses back to the same sharding.
      const std::string printed = named.ToString();
      QVERIFY2(printed.rfind("{mesh[", 0) == 0, qPrintable(Q(printed)));
      QCOMPARE(PARSE(printed), named);
    }
    const HloSharding open = PARSE("{mesh['x'=2,'y'=2] [{?},{'x'}], unreduced={'y'}}");
    QCOMPARE(open.open_dims(), V({0}));
    QCOMPARE(Q(open.ToString()), QString("{mesh['x'=2,'y'=2], [{?}, {'x'}], unreduced={'y'}}"));
    QCOMPARE(Q(PARSE("{mesh['x'=2,'y'=2], device_ids=(3,2,1,0), [{'x'}, {}], replicated={'y'}}").ToString()),
             QString("{mesh['x'=2,'y'=2], device_ids=(3,2,1,0), [{'x'}, {}], replicated={'y'}}"));
    QCOMPARE(Q(PARSE("{mesh['x'=8] [{'x':(1)2, 'x':(4)2}, {'x':(2)2}]}").ToString()),
             QString("{mesh['x'=8], [{'x':(1)2, 'x':(4)2}, {'x':(2)2}]}"));
    QCOMPARE(PARSE("{mesh['x'=2,'y'=2] [{'x', ?}, {}]}").open_dims(), V({0}));
    // Once changed through the API, the classic form is printed.
    HloSharding changed = PARSE("{mesh['x'=2,'y'=2], [{'x'},{'y'}]}");
    changed.set_shard_group(2, true);
    QCOMPARE(Q(changed.ToString()), QString("{devices=[2,2]<=[4] shard_as 2}"));
    // Tuples of named shardings.
    const HloSharding tuple = PARSE("{{mesh['x'=2] [], unreduced={'x'}}, {mesh['x'=2] [], unreduced={'x'}}}");
    QCOMPARE(tuple, PARSE("{{unreduced}, {unreduced}}"));
    QCOMPARE(PARSE(tuple.ToString()), tuple);
    // Metadata in the named form.
    const HloSharding with_meta = PARSE("{mesh['x'=2], [{'x'}], metadata={{op_name=\"m\"}}}");
    QCOMPARE(with_meta.metadata().size(), size_t{1});
    QCOMPARE(Q(with_meta.ToString(true)), QString("{mesh['x'=2], [{'x'}], metadata={op_name=\"m\"}}"));
    QCOMPARE(PARSE(with_meta.ToString(true)), with_meta);
  }

  void perDeviceView() {
    // f32[10] over 4 devices: padded shard of ceil(10/4) = 3 (GSPMD §4.1), the last device holds 1.
    const HloSharding four = PARSE("{devices=[4]<=[4]}");
    QCOMPARE(four.ShardShape({10}), V({3}));
    const int64_t offsets[] = {0, 3, 6, 9};
    const int64_t extents[] = {3, 3, 3, 1};
    for (int64_t d = 0; d < 4; ++d) {
      QCOMPARE(four.TileIndexForDevice(d), V({d}));
      QCOMPARE(four.ShardOffset({10}, d), V({offsets[d]}));
      QCOMPARE(four.ShardValidExtent({10}, d), V({extents[d]}));
    }
    QCOMPARE(four.BytesPerDevice(Shape(PrimitiveType::kF32, {10})), int64_t{12});
    // f32[5] over 4: shards of 2, the tail device holds nothing.
    QCOMPARE(four.ShardValidExtent({5}, 2), V({1}));
    QCOMPARE(four.ShardValidExtent({5}, 3), V({0}));
    QCOMPARE(four.ShardOffset({5}, 3), V({6}));
    // A device outside the assignment has no tile.
    QVERIFY(four.TileIndexForDevice(4).empty());
    QVERIFY(four.ShardOffset({10}, 7).empty());

    // Transposed iota: device 1 sits at tile [1,0].
    const HloSharding t = PARSE("{devices=[2,2]<=[2,2]T(1,0)}");
    QCOMPARE(t.TileIndexForDevice(1), V({1, 0}));
    QCOMPARE(t.ShardOffset({8, 6}, 1), V({4, 0}));
    QCOMPARE(t.ShardShape({8, 6}), V({4, 3}));

    // Partial replication (GSPMD Fig. 1 style): devices 2 and 3 share the second half of dim 0.
    const HloSharding partial = PARSE("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
    QCOMPARE(partial.TileIndexForDevice(2), V({1, 0}));
    QCOMPARE(partial.TileIndexForDevice(3), V({1, 0}));
    QCOMPARE(partial.ShardOffset({8, 6}, 3), V({4, 0}));
    QCOMPARE(partial.ShardShape({8, 6}), V({4, 6}));
    QCOMPARE(partial.BytesPerDevice(Shape(PrimitiveType::kBF16, {8, 6})), int64_t{4 * 6 * 2});

    // Tile-maximal shardings hold the whole array.
    QCOMPARE(PARSE("{replicated}").ShardShape({7, 3}), V({7, 3}));
    QCOMPARE(PARSE("{replicated}").ShardOffset({7, 3}, 5), V({0, 0}));
    QVERIFY(PARSE("{replicated}").TileIndexForDevice(0).empty());
    QCOMPARE(PARSE("{maximal device=1}").ShardValidExtent({7, 3}, 1), V({7, 3}));
    QCOMPARE(PARSE("{maximal device=1}").ShardValidExtent({7, 3}, 0), V({0, 0}));

    // "How To Scale Your Model" part 3 pop quiz: int8[128,2048] as A[I_XY, J] on {X:2, Y:8, Z:2}
    // is tiled 16 ways on I and replicated twice: 8 x 2048 = 16,384 bytes per device.
    const HloSharding quiz = PARSE("{devices=[16,1,2]<=[32] last_tile_dim_replicate}");
    const Shape a(PrimitiveType::kS8, {128, 2048});
    QCOMPARE(quiz.ShardShape(a.dims), V({8, 2048}));
    QCOMPARE(quiz.BytesPerDevice(a), int64_t{16384});
    QCOMPARE(quiz.BytesPerDevice(a) * quiz.NumDevices(), int64_t{512 * 1024});
  }

  void malformedInputs() {
    struct Bad {
      const char* text;
      const char* message;  // a substring of the expected message
      int64_t offset;
    };
    const Bad cases[] = {
        {"", "expected '{' to start the sharding, found end of text", 0},
        {"replicated", "expected '{' to start the sharding, found 'replicated'", 0},
        {"{replicated", "expected '}' to end the sharding, found end of text", 11},
        {"{replicated}}", "expected end of the sharding after its closing '}', found '}'", 12},
        {"{replicatd}", "found 'replicatd'", 1},
        {"{devices=[2,2]0,1,2}", "expected 4 device ids for tile shape [2,2], found 3", 14},
        {"{devices=[2,2]0,1,2,3,4}", "expected 4 device ids for tile shape [2,2], found more", 22},
        {"{devices=[2,2]0,1,1,3}", "found device 1 twice in the tile assignment", 18},
        {"{devices=[2,2]0,x,2,3}", "expected a device id, found 'x'", 16},
        {"{devices=[2,2]0,-1,2,3}", "expected a device id (a non-negative integer), found '-1'", 16},
        {"{devices=[2,0]0,1}", "expected a positive dimension size in the tile shape, found '0'", 12},
        {"{devices=[4]99999999999999999999999,1,2,3}", "does not fit in a 64-bit integer", 12},
        {"{devices=[1048576,1048576]<=[1099511627776]}", "tile shape [1048576,1048576] has more than 1048576 devices", 9},
        {"{devices=[4,2]<=[2,2]}", "expected an iota reshape with 8 devices to match tile shape [4,2], found [2,2]", 16},
        {"{devices=[4,2]<=[2,4]T(0,0)}", "expected T(...) to be a permutation of 0..1 for iota reshape [2,4], found T(0,0)", 22},
        {"{devices=[4,2]<=[2,4]T(1,0,2)}", "found T(1,0,2)", 22},
        {"{devices=[2,2 0,1,2,3}", "expected ']' or ',' in the tile shape, found '0'", 14},
        {"{maximal}", "expected device=<id> in a maximal sharding, found '}'", 8},
        {"{replicated devices=[2]0,1}", "a 'replicated' sharding cannot also have devices=[...]", 12},
        {"{device=1}", "device= is only valid in a maximal sharding", 1},
        {"{replicated manual}", "'manual' conflicts with 'replicated'", 12},
        {"{devices=[2]0,1 last_tile_dims={manual, bogus}}", "expected a subgroup type (replicated, manual, unreduced, maximal), found 'bogus'", 40},
        {"{devices=[2,2]<=[4] last_tile_dims={manual,manual,manual}}", "expected at most 2 subgroup types for tile shape [2,2], found 3", 20},
        {"{devices=[4]<=[4] last_tile_dim_replicate last_tile_dims={manual}}", "cannot both be given", 42},
        {"{manual last_tile_dim_replicate}", "need a tile assignment", 8},
        {"{replicated metadata={op_name=\"a}", "expected '}' to close the '{' opened here, found end of text", 21},
        {"{{replicated}, {{manual}}}", "nested tuple shardings are not valid", 16},
        {"{{replicated} {manual}}", "expected '}' or ',' after a tuple element sharding, found '{'", 14},
        {"{unknown shard_as x}", "expected a shard group id after 'shard_as', found 'x'", 18},
        {"{mesh['x'=2,'y'=2], [{'z'}, {}]}", "found unknown axis 'z'", 22},
        {"{mesh['x'=2,'y'=2], [{'x'}, {'x'}]}", "expected each mesh axis to be used at most once", 29},
        {"{mesh['x'=2,'y'=2], device_ids=(0,1,2), [{'x'}, {}]}", "expected 4 device ids for the mesh, found 3", 20},
        {"{mesh['x'=8] [{'x':(3)2}, {}]}", "expected a sub-axis whose pre-size x size divides axis 'x' of size 8, found :(3)2", 15},
        {"{mesh['x'=8] [{'x':(1)4}, {'x':(2)4}]}", "found 'x':(1)4 overlapping another use of 'x'", 15},
        {"{mesh['x'=2,'x'=2], [{}]}", "expected distinct mesh axis names, found 'x' twice", 12},
        {"{mesh['x'=2], [{'x'}], bogus={'x'}}", "found 'bogus'", 23},
        {"{devices=[2]0,1 metadata}", "expected '=' after 'metadata', found '}'", 24},
    };
    for (const Bad& b : cases) {
      auto r = HloSharding::Parse(b.text);
      QVERIFY2(!r.ok(), b.text);
      const std::string& msg = r.error().message;
      QVERIFY2(msg.find(b.message) != std::string::npos,
               qPrintable(Q(std::string(b.text) + " => " + msg)));
      QVERIFY2(r.error().offset == b.offset,
               qPrintable(Q(std::string(b.text) + " => offset " + std::to_string(r.error().offset) + ": " + msg)));
    }
    QVERIFY(sizeof(cases) / sizeof(cases[0]) >= 15);
  }

  void neverCrashesOnMutatedInput() {
    // Random byte edits of valid texts: parsing must return a value (ok or Error) and, when it
    // succeeds, print something that parses back to the same sharding.
    const std::vector<std::string> seeds = {
        "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced, replicated}}",
        "{{replicated metadata={op_name=\"a\"}}, {devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}}",
        "{mesh['x'=8,'y'=2], device_ids=(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15), [{'x':(1)2, 'x':(4)2}, {'y', ?}], "
        "replicated={'x':(2)2}}",
        "{maximal device=1 shard_like 2}",
        "{devices=[4,8,1]<=[8,4]T(1,0)}"};
    std::mt19937 rng(12345);
    static const char kAlphabet[] = "{}[](),=<>T-?':\" 0123456789xy_mesh\xff\x00/*";
    const std::string alphabet(kAlphabet, sizeof(kAlphabet) - 1);  // keeps the NUL byte
    int parsed = 0;
    for (int iter = 0; iter < 30000; ++iter) {
      std::string s = seeds[static_cast<size_t>(iter) % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        const size_t at = rng() % s.size();
        switch (rng() % 4) {
          case 0: s.erase(at, 1 + rng() % 3); break;
          case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 2: s[at] = alphabet[rng() % alphabet.size()]; break;
          case 3: s = s.substr(0, at); break;
        }
      }
      auto r = HloSharding::Parse(s);
      if (!r.ok()) {
        QVERIFY(r.error().offset >= 0 && r.error().offset <= static_cast<int64_t>(s.size()));
        QVERIFY(!r.error().message.empty());
        continue;
      }
      ++parsed;
      auto again = HloSharding::Parse(r->ToString(true));
      QVERIFY2(again.ok() && *again == *r, qPrintable(Q(s + " => " + r->ToString(true))));
    }
    QVERIFY(parsed > 0);
  }

  void corpusRoundTrip() {
    const std::filesystem::path root = std::filesystem::path(SHARDSCOPE_SHARED_DIR) / "conformance" / "xla";
    if (!std::filesystem::exists(root)) QSKIP("conformance corpus not found");
    int files = 0;
    const std::vector<std::string> texts = CorpusShardings(root, &files);
    std::set<std::string> distinct(texts.begin(), texts.end());
    int failures = 0;
    for (const std::string& text : distinct) {
      auto r = HloSharding::Parse(text);
      if (!r.ok()) {
        ++failures;
        qWarning("cannot parse %s: %s at %lld", text.c_str(), r.error().message.c_str(),
                 static_cast<long long>(r.error().offset));
        continue;
      }
      for (bool with_metadata : {false, true}) {
        const std::string printed = r->ToString(with_metadata);
        auto again = HloSharding::Parse(printed);
        if (!again.ok() || !(*again == *r) || again->ToString(with_metadata) != printed) {
          ++failures;
          qWarning("round trip of %s failed: printed %s", text.c_str(), printed.c_str());
        }
      }
    }
    qInfo("corpus: %zu sharding texts (%zu distinct) from %d files parsed, printed and reparsed", texts.size(),
          distinct.size(), files);
    QCOMPARE(failures, 0);
    QVERIFY(texts.size() > 2000);
    QVERIFY(distinct.size() > 500);
  }
};

QTEST_APPLESS_MAIN(TestSharding)
#include "test_sharding.moc"
