// The project file (core/project/project_file.h): a project written and read back is the same
// project; files as earlier versions wrote them (keys sorted) still read; every kind of bad file
// gives an error that points into it.
#include <QtTest>

#include <string>

#include "core/ir/hlo_text.h"
#include "core/project/project_file.h"
#include "core/zoo/zoo.h"

using namespace shardscope;

namespace {

const char* kModule =
    "HloModule m\n\nENTRY e {\n  p = f32[8,4] parameter(0)\n  w = f32[4,6] parameter(1)\n"
    "  ROOT d = f32[8,6] dot(p, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";

// A project file as the GUI wrote it with Qt (members sorted by key, four-space indent), with
// `extra` replacing the annotations.
std::string QtStyleFile(const std::string& annotations, const std::string& mesh_devices = "[0, 2, 1, 3]",
                        const std::string& version = "1") {
  std::string module_json;
  for (const char* c = kModule; *c; ++c) {
    if (*c == '\n') module_json += "\\n";
    else module_json += *c;
  }
  std::string out = "{\n    \"annotations\": ";
  out += annotations;
  out += ",\n    \"format\": \"shardscope-project\",\n    \"mesh\": \"X=2,Y=2\",\n    \"mesh_devices\": ";
  out += mesh_devices;
  out += ",\n    \"module\": \"";
  out += module_json;
  out += "\",\n    \"selected\": \"d\",\n    \"source\": {\n        \"kind\": \"hlo\",\n"
         "        \"source\": \"/tmp/m.hlo\"\n    },\n    \"version\": ";
  out += version;
  out += "\n}\n";
  return out;
}

}  // namespace

class TestProjectFile : public QObject {
  Q_OBJECT

 private slots:
  void writtenAndReadBack() {
    auto module = ZooBuild("mlp", {{"layers", "1"}, {"annotations", "none"}, {"mesh_x", "2"}, {"mesh_y", "2"}});
    QVERIFY(module.ok());
    auto mesh = ZooMesh("mlp", {{"mesh_x", "2"}, {"mesh_y", "2"}});
    QVERIFY(mesh.ok());
    Project p;
    p.module = std::move(*module);
    ProjectContents& c = p.contents;
    c.mesh = DeviceMesh(mesh->axes(), {3, 1, 2, 0});
    const Instruction* first = p.module->entry()->parameters()[0];
    QVERIFY(first && first->shape().rank() == 2);
    auto s = HloSharding::Parse("{devices=[2,2]3,1,2,0}");
    QVERIFY(s.ok());
    c.annotations.push_back({first->name(), *s});
    c.source_kind = "zoo";
    c.source = "mlp";
    c.selected = first->name();
    const std::string text = WriteProjectFile(p.module.get(), c);
    QVERIFY(text.find("\"named\": ") != std::string::npos);  // the notation for people is written

    auto back = ReadProjectFile(text, "p.shardscope");
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
    std::string why;
    // The annotation is set on the instruction it names; otherwise the modules are equal.
    QVERIFY(back->module->FindInstruction(first->name())->has_sharding());
    QCOMPARE(*back->module->FindInstruction(first->name())->sharding(), *s);
    back->module->FindInstruction(first->name())->clear_sharding();
    QVERIFY2(ModulesEqual(*p.module, *back->module, &why), why.c_str());
    const ProjectContents& b = back->contents;
    QVERIFY(b.mesh == c.mesh);
    QCOMPARE(b.mesh.device_order(), (std::vector<int64_t>{3, 1, 2, 0}));
    QCOMPARE(b.annotations.size(), size_t{1});
    QCOMPARE(b.annotations[0].instruction, first->name());
    QCOMPARE(b.source_kind, std::string("zoo"));
    QCOMPARE(b.source, std::string("mlp"));
    QCOMPARE(b.selected, first->name());
    QVERIFY(!b.zoo_settings.has_value());  // none written: none read
    QVERIFY(!b.weight_update_sharding);
    QVERIFY(text.find("\"analysis\"") == std::string::npos);  // an option left off is not written

    // The zoo settings the module was built with (its small twin is built from them), even none.
    c.zoo_settings = std::map<std::string, std::string, std::less<>>{{"layers", "1"}, {"mesh_x", "2"}};
    auto zoo = ReadProjectFile(WriteProjectFile(p.module.get(), c), "z.shardscope");
    QVERIFY2(zoo.ok(), zoo.ok() ? "" : zoo.error().message.c_str());
    QVERIFY(zoo->contents.zoo_settings == c.zoo_settings);
    c.zoo_settings = std::map<std::string, std::string, std::less<>>{};
    auto defaults = ReadProjectFile(WriteProjectFile(p.module.get(), c), "d.shardscope");
    QVERIFY(defaults.ok());
    QVERIFY(defaults->contents.zoo_settings.has_value() && defaults->contents.zoo_settings->empty());
    c.zoo_settings.reset();

    // The simulated sizes (zoo settings, a scale), when the user set them.
    c.simulated_sizes.zoo_settings = {{"batch", "1024"}, {"model", "8192"}};
    c.simulated_sizes.scale = 4;
    c.simulated_sizes.dimension_factors = {{"x:0", 8}};
    auto sized = ReadProjectFile(WriteProjectFile(p.module.get(), c), "s.shardscope");
    QVERIFY2(sized.ok(), sized.ok() ? "" : sized.error().message.c_str());
    QVERIFY(sized->contents.simulated_sizes == c.simulated_sizes);
    QCOMPARE(sized->contents.simulated_sizes.zoo_settings.at("batch"), std::string("1024"));
    c.simulated_sizes = {};

    // The analysis options: weight-update sharding on is written and read back.
    c.weight_update_sharding = true;
    const std::string with_wus = WriteProjectFile(p.module.get(), c);
    QVERIFY(with_wus.find("\"weight_update_sharding\": true") != std::string::npos);
    auto wus = ReadProjectFile(with_wus, "w.shardscope");
    QVERIFY2(wus.ok(), wus.ok() ? "" : wus.error().message.c_str());
    QVERIFY(wus->contents.weight_update_sharding);
    QVERIFY(wus->contents.slice.empty());  // no slice override written: none read

    // The slice override (placement on the physical torus) round-trips, member by member.
    c.weight_update_sharding = false;
    c.slice.placement = "row-major";
    c.slice.wraparound = false;
    c.slice.shape = {4, 8};
    c.slice.cores_per_chip = 2;  // TPU v3 cores as devices
    c.slice.mesh_order = "Y,X";   // a search candidate's placement
    const std::string with_slice = WriteProjectFile(p.module.get(), c);
    QVERIFY(with_slice.find("\"slice\"") != std::string::npos);
    QVERIFY(with_slice.find("\"weight_update_sharding\"") == std::string::npos);
    auto sliced = ReadProjectFile(with_slice, "s.shardscope");
    QVERIFY2(sliced.ok(), sliced.ok() ? "" : sliced.error().message.c_str());
    QCOMPARE(sliced->contents.slice, c.slice);
    QCOMPARE(sliced->contents.slice.wraparound, std::optional<bool>(false));
    QCOMPARE(sliced->contents.slice.cores_per_chip, std::optional<int64_t>(2));
    QVERIFY(with_slice.find("\"cores_per_chip\": 2") != std::string::npos);
    QVERIFY(with_slice.find("\"mesh_order\": \"Y,X\"") != std::string::npos);
    QCOMPARE(sliced->contents.slice.mesh_order, std::string("Y,X"));
    // Only the wraparound given: the rest stays the generation's.
    c.slice = {};
    c.slice.wraparound = true;
    auto wrap_only = ReadProjectFile(WriteProjectFile(p.module.get(), c), "w2.shardscope");
    QVERIFY(wrap_only.ok());
    QCOMPARE(wrap_only->contents.slice, c.slice);
    QVERIFY(wrap_only->contents.slice.placement.empty() && wrap_only->contents.slice.shape.empty());
  }

  void readsFilesWithSortedKeys() {
    auto p = ReadProjectFile(QtStyleFile("[\n        {\n            \"instruction\": \"w\",\n"
                                         "            \"named\": \"w[I, J_Y]\",\n"
                                         "            \"sharding\": \"{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\"\n"
                                         "        }\n    ]"),
                             "old.shardscope");
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(p->contents.mesh.num_axes(), int64_t{2});
    QCOMPARE(p->contents.mesh.axes()[1].name, std::string("Y"));
    QCOMPARE(p->contents.mesh.device_order(), (std::vector<int64_t>{0, 2, 1, 3}));
    QCOMPARE(p->module->FindInstruction("w")->sharding()->ToString(),
             std::string("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"));
    QVERIFY(!p->module->FindInstruction("p")->has_sharding());
    QCOMPARE(p->contents.selected, std::string("d"));
    QCOMPARE(p->contents.source, std::string("/tmp/m.hlo"));
    // Written before the slice override existed: the generation's slice.
    QVERIFY(p->contents.slice.empty());
  }

  void errorsPointIntoTheFile_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not JSON") << "{\n  \"format\": shardscope\n}" << "f.shardscope:2:13: error: not valid JSON: expected a value";
    QTest::newRow("not an object") << "[1]" << "f.shardscope:1:1: error: expected a JSON object, found an array";
    QTest::newRow("other format") << "{\"format\": \"trace\"}" << "f.shardscope:1:12: error: not a ShardScope project";
    QTest::newRow("newer") << QString::fromStdString(QtStyleFile("[]", "[]", "7"))
                           << "error: written by a newer ShardScope (project version 7; this one reads up to 1)";
    QTest::newRow("no module") << "{\"format\": \"shardscope-project\", \"mesh\": \"X=2\"}" << "f.shardscope:1:1: error: missing \"module\"";
    QTest::newRow("module not a string") << "{\"format\": \"shardscope-project\", \"module\": 3}"
                                         << "f.shardscope:1:44: error: \"module\" must be a string, found a number";
    QTest::newRow("bad module") << "{\"format\": \"shardscope-project\", \"mesh\": \"X=2\", \"module\": \"HloModule m\\nENTRY e {\\n  ROOT a = f32[2] negate(q)\\n}\"}"
                                << "f.shardscope:1:59: error: the embedded module does not parse: f.shardscope#module:3:";
    QTest::newRow("bad mesh") << QString::fromStdString(QtStyleFile("[]")).replace("X=2,Y=2", "X=0")
                              << "error: bad mesh \"X=0\"";
    QTest::newRow("device count") << QString::fromStdString(QtStyleFile("[]", "[0, 1, 2]"))
                                  << ":5:21: error: mesh_devices lists 3 devices but the mesh has 4";
    QTest::newRow("device twice") << QString::fromStdString(QtStyleFile("[]", "[0, 1, 1, 3]"))
                                  << ":5:28: error: device 1 listed twice";
    QTest::newRow("device range") << QString::fromStdString(QtStyleFile("[]", "[0, 1, 4, 3]"))
                                  << ":5:28: error: a device id of the mesh (0 to 3) expected";
    QTest::newRow("unknown instruction") << QString::fromStdString(QtStyleFile("[{\"instruction\": \"q\", \"sharding\": \"{replicated}\"}]"))
                                         << ":2:37: error: annotation for unknown instruction \"q\"";
    QTest::newRow("bad sharding") << QString::fromStdString(QtStyleFile("[{\"instruction\": \"p\", \"sharding\": \"{devices=[2}\"}]"))
                                  << ":2:54: error: bad sharding for \"p\"";
    QTest::newRow("wrong rank") << QString::fromStdString(QtStyleFile("[{\"instruction\": \"p\", \"sharding\": \"{devices=[2]0,1}\"}]"))
                                << ":2:54: error: annotation does not fit: \"p\": sharding {devices=[2]0,1} tiles 1 dimension but the shape f32[8,4] has rank 2";
    QTest::newRow("too many devices") << QString::fromStdString(QtStyleFile("[{\"instruction\": \"p\", \"sharding\": \"{devices=[8,1]<=[8]}\"}]"))
                                      << ":2:54: error: the sharding of \"p\" spans 8 devices but the mesh has 4";
    QTest::newRow("device outside mesh") << QString::fromStdString(QtStyleFile("[{\"instruction\": \"p\", \"sharding\": \"{devices=[2,1]0,9}\"}]"))
                                         << "names device 9";
    QTest::newRow("analysis not an object") << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": 1, \"format\"")
                                            << ":3:17: error: \"analysis\" must be an object";
    QTest::newRow("option not a boolean")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"weight_update_sharding\": \"yes\"}, \"format\"")
        << "error: \"weight_update_sharding\" must be true or false";
    QTest::newRow("zoo settings not strings")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"kind\": \"hlo\",", "\"kind\": \"example\", \"zoo_settings\": {\"layers\": 2},")
        << "error: zoo setting \"layers\" must be a string";
    QTest::newRow("slice not an object")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"slice\": [4, 4]}, \"format\"")
        << "error: \"slice\" must be an object";
    QTest::newRow("slice shape not numbers")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"slice\": {\"shape\": [4, 0]}}, \"format\"")
        << "error: \"shape\" takes whole numbers >= 1";
    QTest::newRow("slice cores per chip not 1 or 2")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"slice\": {\"cores_per_chip\": 3}}, \"format\"")
        << "error: \"cores_per_chip\" must be 1 or 2";
    QTest::newRow("slice mesh order not a string")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"slice\": {\"mesh_order\": 2}}, \"format\"")
        << "error: \"mesh_order\" must be the mesh axes minor first";
    QTest::newRow("slice wraparound not a boolean")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"slice\": {\"wraparound\": 1}}, \"format\"")
        << "error: \"wraparound\" must be true or false";
    QTest::newRow("simulated scale not a whole number")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"simulated_sizes\": {\"scale\": 0}}, \"format\"")
        << ":3:47: error: \"scale\" must be a whole number >= 1";
    QTest::newRow("simulated dimension factor not a number")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"simulated_sizes\": {\"dimensions\": {\"x:0\": \"8\"}}}, \"format\"")
        << "error: the factor of \"x:0\" must be a whole number >= 1";
    QTest::newRow("simulated zoo settings not strings")
        << QString::fromStdString(QtStyleFile("[]")).replace("\"format\"", "\"analysis\": {\"simulated_sizes\": {\"zoo_settings\": {\"batch\": 64}}}, \"format\"")
        << "error: zoo setting \"batch\" must be a string";
    QTest::newRow("annotation not an object") << QString::fromStdString(QtStyleFile("[\"p\"]")) << ":2:21: error: an annotation must be an object";
  }
  void errorsPointIntoTheFile() {
    QFETCH(QString, text);
    QFETCH(QString, expected);
    auto p = ReadProjectFile(text.toStdString(), "f.shardscope");
    QVERIFY(!p.ok());
    QVERIFY2(p.error().message.find(expected.toStdString()) != std::string::npos, p.error().message.c_str());
  }
};

QTEST_APPLESS_MAIN(TestProjectFile)
#include "test_project_file.moc"
