// DeviceMesh, GSPMD mesh_split (§3.1, Fig. 1, §3.2 examples), MeshShard / AxesOf and the named-axis
// notation of "How To Scale Your Model" part 3 (../shared/papers/004_*.txt).
#include <QtTest>

#include <random>
#include <string>
#include <vector>

#include "core/sharding/mesh.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"

using namespace shardscope;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }
std::vector<int64_t> V(std::initializer_list<int64_t> v) { return std::vector<int64_t>(v); }

DeviceMesh MustMesh(const std::string& text, const char* file, int line) {
  auto r = DeviceMesh::Parse(text);
  if (!r.ok()) {
    QTest::qFail(qPrintable(Q("mesh " + text + ": " + r.error().message)), file, line);
    return DeviceMesh();
  }
  return *r;
}
#define MESH(text) MustMesh(text, __FILE__, __LINE__)

HloSharding MustSharding(const Result<HloSharding>& r, const char* file, int line) {
  if (!r.ok()) {
    QTest::qFail(qPrintable(Q(r.error().message)), file, line);
    return HloSharding::Unknown();
  }
  return *r;
}
#define OK(expr) MustSharding((expr), __FILE__, __LINE__)

HloSharding Parse(const std::string& text) {
  auto r = HloSharding::Parse(text);
  return r.ok() ? *r : HloSharding::Unknown();
}

}  // namespace

class TestMesh : public QObject {
  Q_OBJECT

 private slots:
  void parseForms() {
    const DeviceMesh a = MESH("X=4,Y=4");
    QCOMPARE(a.num_axes(), int64_t{2});
    QCOMPARE(a.num_devices(), int64_t{16});
    QCOMPARE(Q(a.axes()[1].name), QString("Y"));
    QCOMPARE(a.axis_size(0), int64_t{4});
    QCOMPARE(Q(a.ToString()), QString("X=4,Y=4"));
    QCOMPARE(Q(MESH("x:2,y:8,z:2").ToString()), QString("x=2,y=8,z=2"));
    const DeviceMesh braces = MESH("{X:2, Y:8, Z:2}");
    QCOMPARE(braces.num_devices(), int64_t{32});
    QCOMPARE(braces, DeviceMesh({{"X", 2}, {"Y", 8}, {"Z", 2}}));
    // The book's spelling, typographic quotes included.
    QCOMPARE(MESH("Mesh({\xE2\x80\x98X': 2, \xE2\x80\x98Y': 8, \xE2\x80\x98Z': 2})"), braces);
    QCOMPARE(MESH("Mesh({'X': 2, 'Y': 8, 'Z': 2})"), braces);
    // XLA's named-mesh spelling with an explicit device order.
    const DeviceMesh ordered = MESH("mesh['x'=2,'y'=2], device_ids=(3,2,1,0)");
    QCOMPARE(ordered.device_order(), V({3, 2, 1, 0}));
    QCOMPARE(Q(ordered.ToString()), QString("x=2,y=2 device_ids=(3,2,1,0)"));
    QCOMPARE(MESH(ordered.ToString()), ordered);
    QVERIFY(ordered != MESH("x=2,y=2"));
    QCOMPARE(a.AxisIndex("Y"), int64_t{1});
    QCOMPARE(a.AxisIndex("Z"), int64_t{-1});
  }

  void parseErrors() {
    struct Bad {
      const char* text;
      const char* message;
      int64_t offset;
    };
    const Bad cases[] = {
        {"", "expected a mesh axis name, found end of text", 0},
        {"X=0", "expected a positive size for mesh axis 'X', found 0", 2},
        {"X=4,X=2", "expected distinct mesh axis names, found 'X' twice", 4},
        {"X=4,Y", "expected '=' or ':' after mesh axis 'Y', found end of text", 5},
        {"X=4,Y=q", "expected the size of mesh axis 'Y', found 'q'", 6},
        {"{X:2, Y:8", "expected '}' or ',', found end of text", 9},
        {"X=99999999999999999999", "does not fit in 64 bits", 2},
        {"X=1048576,Y=4", "mesh has more than 1048576 devices", 0},
        {"X=2 device_ids=(0,0)", "expected distinct device ids, found 0 twice", 18},
        {"X=2 device_ids=(0,5)", "expected a device id below 2, found 5", 18},
        {"X=2 device_ids=(1)", "expected 2 device ids, found 1", 4},
        {"X=2 Y=2", "expected end of the mesh or device_ids=(...), found 'Y'", 4},
    };
    for (const Bad& b : cases) {
      auto r = DeviceMesh::Parse(b.text);
      QVERIFY2(!r.ok(), b.text);
      QVERIFY2(r.error().message.find(b.message) != std::string::npos,
               qPrintable(Q(std::string(b.text) + " => " + r.error().message)));
      QVERIFY2(r.error().offset == b.offset,
               qPrintable(Q(std::string(b.text) + " => offset " + std::to_string(r.error().offset))));
    }
  }

  void coordinates() {
    const DeviceMesh m = MESH("X=2,Y=4");
    QCOMPARE(m.DeviceAt({1, 2}), int64_t{6});
    QCOMPARE(m.CoordsOf(6), V({1, 2}));
    QCOMPARE(m.DeviceAt({2, 0}), int64_t{-1});
    QCOMPARE(m.DeviceAt({0}), int64_t{-1});
    QVERIFY(m.CoordsOf(8).empty());
    for (int64_t d = 0; d < m.num_devices(); ++d) QCOMPARE(m.DeviceAt(m.CoordsOf(d)), d);
    QVERIFY(m.AsTileAssignment().is_iota());
    QCOMPARE(Q(m.AsTileAssignment().ToString()), QString("[2,4]<=[8]"));
    // GSPMD Fig. 1's mesh [[0,2],[1,3]].
    const DeviceMesh fig1({{"x", 2}, {"y", 2}}, {0, 2, 1, 3});
    QCOMPARE(fig1.DeviceAt({0, 1}), int64_t{2});
    QCOMPARE(fig1.CoordsOf(1), V({1, 0}));
    QCOMPARE(Q(fig1.AsTileAssignment().ToString()), QString("[2,2]0,2,1,3"));
  }

  void meshSplitGspmdFigure1() {
    // GSPMD §3.1 Fig. 1, tiled: device mesh [[0,2],[1,3]], mesh_split(t, mesh, [0, 1]); each device
    // holds the tile at its mesh position.
    const DeviceMesh tiled_mesh({{"x", 2}, {"y", 2}}, {0, 2, 1, 3});
    const HloSharding tiled = OK(MeshSplit(2, tiled_mesh, {0, 1}));
    QCOMPARE(Q(tiled.ToString()), QString("{devices=[2,2]0,2,1,3}"));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j) QCOMPARE(tiled.tile_assignment()({i, j}), tiled_mesh.DeviceAt({i, j}));
    QCOMPARE(tiled.TileIndexForDevice(2), V({0, 1}));

    // Fig. 1, partially tiled: mesh [[0,1],[2,3]], mesh_split(t, mesh, [-1, 0]): device tensor
    // [[[0,1],[2,3]]], innermost dim is replication.
    const DeviceMesh partial_mesh({{"x", 2}, {"y", 2}});
    const HloSharding partial = OK(MeshSplit(2, partial_mesh, {-1, 0}));
    QCOMPARE(partial.tile_assignment().dims(), V({1, 2, 2}));
    QCOMPARE(partial.tile_assignment().devices(), V({0, 1, 2, 3}));
    QVERIFY(partial.HasPartialReplication());
    QCOMPARE(Q(partial.ToString()), QString("{devices=[1,2,2]<=[4] last_tile_dim_replicate}"));
    QCOMPARE(partial.TileIndexForDevice(1), V({0, 0}));
    QCOMPARE(partial.TileIndexForDevice(2), V({0, 1}));

    // Fig. 1, replicated: no dimension mapped.
    QVERIFY(OK(MeshSplit(2, partial_mesh, {-1, -1})).IsReplicated());

    // §3.2: BD,DF->BF with bd = mesh_split(bd, mesh, [0,-1]), df = mesh_split(df, mesh, [-1,1]); the
    // output completes to mesh_split(bf, mesh, [0,1]).
    QCOMPARE(Q(OK(MeshSplit(2, partial_mesh, {0, -1})).ToString()),
             QString("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"));
    const HloSharding df = OK(MeshSplit(2, partial_mesh, {-1, 1}));
    QCOMPARE(df.tile_assignment().devices(), V({0, 2, 1, 3}));
    QCOMPARE(Q(df.ToString()), QString("{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"));
    QCOMPARE(Q(OK(MeshSplit(2, partial_mesh, {0, 1})).ToString()), QString("{devices=[2,2]<=[4]}"));
    // MoE: edf = mesh_split(edf, mesh, [0, -1, 1]).
    QCOMPARE(Q(OK(MeshSplit(3, partial_mesh, {0, -1, 1})).ToString()), QString("{devices=[2,1,2]<=[4]}"));

    // Errors.
    QVERIFY(!MeshSplit(2, partial_mesh, {0}).ok());
    auto twice = MeshSplit(2, partial_mesh, {0, 0});
    QVERIFY(!twice.ok());
    QVERIFY(twice.error().message.find("mesh axis x is used twice") != std::string::npos);
    auto range = MeshSplit(2, partial_mesh, {2, -1});
    QVERIFY(!range.ok());
    QVERIFY(range.error().message.find("is not a mesh dimension") != std::string::npos);
  }

  void meshShardAndTheBookQuiz() {
    // "How To Scale Your Model" part 3, pop quiz: int8[128, 2048] sharded A[I_XY, J] on
    // Mesh({'X': 2, 'Y': 8, 'Z': 2}): int8[8, 2048] per device = 16,384 bytes; replicated over Z,
    // so 512 KiB across all 32 devices.
    const DeviceMesh mesh = MESH("{X:2, Y:8, Z:2}");
    AxisAssignment xy;
    xy.dim_axes = {{0, 1}, {}};
    const HloSharding a = OK(MeshShard(2, mesh, xy));
    QCOMPARE(Q(a.ToString()), QString("{devices=[16,1,2]<=[32] last_tile_dim_replicate}"));
    const Shape shape(PrimitiveType::kS8, {128, 2048});
    QCOMPARE(a.ShardShape(shape.dims), V({8, 2048}));
    QCOMPARE(a.BytesPerDevice(shape), int64_t{16384});
    QCOMPARE(a.BytesPerDevice(shape) * mesh.num_devices(), int64_t{512 * 1024});
    QCOMPARE(OK(ParseNamedAxes("A[I_XY, J]", 2, mesh)), a);

    // The order of the subscripts is the traversal order: I_YX is a different device order.
    const HloSharding yx = OK(ParseNamedAxes("A[I_YX, J]", 2, mesh));
    QVERIFY(yx != a);
    QCOMPARE(Q(yx.ToString()), QString("{devices=[16,1,2]<=[2,8,2]T(1,0,2) last_tile_dim_replicate}"));
    QCOMPARE(yx.BytesPerDevice(shape), int64_t{16384});

    // Unreduced axes become an unreduced subgroup.
    const DeviceMesh xy2 = MESH("X=2,Y=2");
    QCOMPARE(Q(OK(ParseNamedAxes("[I_X, J]{U_Y}", 2, xy2)).ToString()),
             QString("{devices=[2,1,2]<=[4] last_tile_dims={unreduced}}"));
    AxisAssignment unreduced_only;
    unreduced_only.unreduced_axes = {0, 1};
    QCOMPARE(OK(MeshShard(2, xy2, unreduced_only)).kind(), HloSharding::Kind::kUnreduced);

    AxisAssignment bad;
    bad.dim_axes = {{0}, {0}};
    QVERIFY(!MeshShard(2, xy2, bad).ok());
    bad.dim_axes = {{0}, {}, {}};
    QVERIFY(!MeshShard(2, xy2, bad).ok());
    bad.dim_axes = {{5}};
    QVERIFY(!MeshShard(1, xy2, bad).ok());
  }

  void namedAxesRoundTrip() {
    struct Case {
      const char* mesh;
      const char* named;
      int64_t rank;
    };
    const Case cases[] = {
        {"X=2,Y=2", "A[I_X, J_Y]", 2},
        {"X=2,Y=2", "A[I_Y, J_X]", 2},
        {"X=2,Y=2", "A[I_XY, J]", 2},
        {"X=2,Y=2", "A[I_YX, J]", 2},
        {"X=2,Y=2", "A[I, J]", 2},
        {"X=2,Y=2", "A[I_X, J]", 2},
        {"X=2,Y=2", "A[I, J]{U_X}", 2},
        {"X=2,Y=8,Z=2", "A[I_XY, J]", 2},
        {"X=2,Y=8,Z=2", "A[I_Z, J_YX]", 2},
        {"X=2,Y=2,Z=2", "A[I, J_Z]{U_XY}", 2},
        {"X=4,Y=4,Z=4", "A[I_X, J_Y]{U_Z}", 2},
        {"X=8,Y=4", "A[I_Y, J]", 2},
        {"X=2,Y=2,Z=2", "A[I_X, J, K_ZY]", 3},
        {"X=2", "A[]", 0},
        {"data=2,model=4", "A[I_data.model, J]", 2},
        {"data=2,model=4", "A[I_model, J_data]", 2},
    };
    for (const Case& c : cases) {
      const DeviceMesh mesh = MESH(c.mesh);
      auto sharding = ParseNamedAxes(c.named, c.rank, mesh);
      QVERIFY2(sharding.ok(), qPrintable(Q(std::string(c.named) + ": " + (sharding.ok() ? "" : sharding.error().message))));
      auto text = ToNamedAxes(*sharding, c.rank, mesh);
      QVERIFY2(text.ok(), qPrintable(Q(std::string(c.named) + ": " + (text.ok() ? "" : text.error().message))));
      QCOMPARE(Q(*text), Q(c.named));
      // And through the XLA text form.
      auto reparsed = HloSharding::Parse(sharding->ToString());
      QVERIFY(reparsed.ok());
      QCOMPARE(Q(*ToNamedAxes(*reparsed, c.rank, mesh)), Q(c.named));
    }
    // Book spellings: tensor names, dimension names, LaTeX braces, no tensor name.
    const DeviceMesh v4 = MESH("X=4,Y=4,Z=4");
    const HloSharding c6 = OK(ParseNamedAxes("[B_X, D_Y]{U_Z}", 2, v4));
    QCOMPARE(Q(*ToNamedAxes(c6, 2, v4, "", {"B", "D"})), QString("[B_X, D_Y]{U_Z}"));
    QCOMPARE(OK(ParseNamedAxes("A[I_{XY}, J]", 2, v4)), OK(ParseNamedAxes("A[I_XY, J]", 2, v4)));
    QCOMPARE(OK(ParseNamedAxes("W[E_Y, F]", 2, MESH("X=8,Y=4"))),
             Parse("{devices=[4,1,8]<=[8,4]T(1,0) last_tile_dim_replicate}"));
    // Default dimension names continue I, J, K, L.
    const DeviceMesh x2 = MESH("X=2");
    QCOMPARE(Q(*ToNamedAxes(OK(MeshSplit(4, x2, {-1, -1, -1, 0})), 4, x2)), QString("A[I, J, K, L_X]"));
  }

  void axesOf() {
    const DeviceMesh m = MESH("X=2,Y=2");
    auto axes = AxesOf(Parse("{devices=[2,2]<=[2,2]T(1,0)}"), 2, m);
    QVERIFY(axes.ok());
    QCOMPARE(axes->dim_axes, (std::vector<std::vector<int64_t>>{{1}, {0}}));
    QVERIFY(axes->unreduced_axes.empty());
    auto yx = AxesOf(Parse("{devices=[4,1]0,2,1,3}"), 2, m);
    QVERIFY(yx.ok());
    QCOMPARE(yx->dim_axes, (std::vector<std::vector<int64_t>>{{1, 0}, {}}));
    auto replicated = AxesOf(HloSharding::Replicate(), 3, m);
    QVERIFY(replicated.ok());
    QCOMPARE(replicated->dim_axes, (std::vector<std::vector<int64_t>>{{}, {}, {}}));
    auto unreduced = AxesOf(HloSharding::Unreduced(), 1, m);
    QVERIFY(unreduced.ok());
    QCOMPARE(unreduced->unreduced_axes, V({0, 1}));
    // Over GSPMD Fig. 1's mesh order [[0,2],[1,3]], devices=[2,2]0,2,1,3 is the plain [X, Y] split.
    const DeviceMesh fig1({{"x", 2}, {"y", 2}}, {0, 2, 1, 3});
    auto fig = AxesOf(Parse("{devices=[2,2]0,2,1,3}"), 2, fig1);
    QVERIFY(fig.ok());
    QCOMPARE(fig->dim_axes, (std::vector<std::vector<int64_t>>{{0}, {1}}));

    // Not expressible.
    struct Bad {
      const char* sharding;
      int64_t rank;
      const char* message;
    };
    const Bad cases[] = {
        {"{devices=[4]0,3,1,2}", 1, "its device order is not a split of the mesh axes"},
        {"{devices=[2,2]0,1,2,3}", 1, "tiles 2 dimensions but the tensor has rank 1"},
        {"{devices=[2]0,1}", 1, "spans 2 devices but mesh X=2,Y=2 has 4"},
        {"{maximal device=0}", 1, "is not expressible over mesh axes"},
        {"{devices=[2,2]<=[4] last_tile_dims={manual}}", 1, "has a manual subgroup"},
        {"{devices=[2,2]0,3,1,2}", 2, "would shard more than one dimension"},
    };
    for (const Bad& b : cases) {
      auto r = AxesOf(Parse(b.sharding), b.rank, m);
      QVERIFY2(!r.ok(), b.sharding);
      QVERIFY2(r.error().message.find(b.message) != std::string::npos,
               qPrintable(Q(std::string(b.sharding) + " => " + r.error().message)));
    }
    QVERIFY(!ToNamedAxes(Parse("{devices=[4]0,3,1,2}"), 1, m).ok());
  }

  void namedAxesErrors() {
    const DeviceMesh m = MESH("X=2,Y=2");
    struct Bad {
      const char* text;
      int64_t rank;
      const char* message;
      int64_t offset;
    };
    const Bad cases[] = {
        {"A[I_Q, J]", 2, "expected a mesh axis (X, Y), found 'Q'", 4},
        {"A[I_X, J_X]", 2, "mesh axis X is used twice", 9},
        {"A[I_X", 1, "expected ']' or ',' in the dimension list, found end of text", 5},
        {"A I_X]", 1, "expected '[' to start the dimension list (as in A[I_X, J]), found 'I_X'", 2},
        {"A[I_X]", 2, "expected 2 dimensions for a rank-2 tensor, found 1", 0},
        {"[I_X, J]{V_Y}", 2, "expected 'U_' followed by mesh axes", 9},
        {"[I_X, J]{U_Y", 2, "expected '}' or ',' to end the unreduced axes, found end of text", 12},
        {"[I_, J]", 2, "expected mesh axes after '_'", 3},
        {"[I_X, J] extra", 2, "expected end of the sharding, found 'extra'", 9},
    };
    for (const Bad& b : cases) {
      auto r = ParseNamedAxes(b.text, b.rank, m);
      QVERIFY2(!r.ok(), b.text);
      QVERIFY2(r.error().message.find(b.message) != std::string::npos,
               qPrintable(Q(std::string(b.text) + " => " + r.error().message)));
      QVERIFY2(r.error().offset == b.offset,
               qPrintable(Q(std::string(b.text) + " => offset " + std::to_string(r.error().offset))));
    }
  }

  void neverCrashesOnMutatedInput() {
    // Random byte edits of valid texts: every parser returns a value (ok or an Error with an offset
    // inside the text), and whatever parses round-trips.
    const std::vector<std::string> meshes = {"{X:2, Y:8, Z:2}", "mesh['x'=2,'y'=2], device_ids=(3,2,1,0)",
                                             "data=2,model=4"};
    const std::vector<std::string> named = {"A[I_XY, J_Z]{U_W}", "[B_{X}, D_Y]", "W'[E_Y, F]{U_X, U_Z}"};
    const DeviceMesh mesh = MESH("X=2,Y=2,Z=2,W=2");
    std::mt19937 rng(777);
    static const char kAlphabet[] = "{}[](),=:_'\"?XYZW 0123456789U.\xe2\x80\x98\x00";
    const std::string alphabet(kAlphabet, sizeof(kAlphabet) - 1);
    auto mutate = [&](std::string s) {
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
      return s;
    };
    for (int iter = 0; iter < 20000; ++iter) {
      const std::string m = mutate(meshes[static_cast<size_t>(iter) % meshes.size()]);
      auto pm = DeviceMesh::Parse(m);
      if (pm.ok()) {
        auto again = DeviceMesh::Parse(pm->ToString());
        QVERIFY2(again.ok() && *again == *pm, qPrintable(Q(m)));
      } else {
        QVERIFY(pm.error().offset >= 0 && pm.error().offset <= static_cast<int64_t>(m.size()));
      }
      const std::string n = mutate(named[static_cast<size_t>(iter) % named.size()]);
      auto pn = ParseNamedAxes(n, -1, mesh);
      if (pn.ok()) {
        const int64_t rank = pn->IsTiled() ? pn->TiledDataRank() : -1;
        if (rank >= 0) {
          auto text = ToNamedAxes(*pn, rank, mesh);
          QVERIFY2(text.ok(), qPrintable(Q(n)));
          QCOMPARE(OK(ParseNamedAxes(*text, rank, mesh)), *pn);
        }
      } else if (pn.error().offset >= 0) {
        QVERIFY(pn.error().offset <= static_cast<int64_t>(n.size()));
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestMesh)
#include "test_mesh.moc"
