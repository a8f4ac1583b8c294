// Tests of the exports (simulator/trace_export.h): Chrome trace JSON parsed back with QJsonDocument
// (QtCore in the test only) and CSV parsed back with a small RFC 4180 reader.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "simulator/run_result.h"
#include "simulator/trace_export.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

TimelineEvent Ev(Stream s, double start, double dur, std::string name, std::string kind, int64_t bytes,
                 double flops) {
  TimelineEvent e;
  e.stream = s;
  e.start_s = start;
  e.duration_s = dur;
  e.instruction = std::move(name);
  e.kind = std::move(kind);
  e.bytes = bytes;
  e.flops = flops;
  return e;
}

MemorySample Mem(double t, int64_t params, int64_t opt, int64_t act, int64_t grad, int64_t tmp) {
  MemorySample m;
  m.time_s = t;
  m.bytes = {params, opt, act, grad, tmp};
  return m;
}

// 3 devices: devices 0 and 2 run class 0, device 1 runs class 1.
RunResult SmallRun() {
  RunResult r;
  r.id = 42;
  r.created_unix_ms = 1714564800123;
  r.label = "baseline";
  r.inputs = {"mlp", "abc123", "TPU v4", "X=3", "ring", "X=3 along physical axis 0", {{"microbatches", "2"}}};
  r.summary.num_devices = 3;
  r.summary.step_time_s = 2.5e-3;
  r.summary.mfu = 0.5;
  r.summary.peak_memory_bytes = 3000;
  r.summary.bytes_communicated = 6144;

  DeviceClass c0;
  c0.label = "main";
  c0.events = {Ev(Stream::kCompute, 0, 1.5e-6, "dot.1", "dot", 100, 2e9),
               Ev(Stream::kCommunication, 1e-6, 2.25e-6, "all-reduce.2", "all-reduce", 2048, 0),
               Ev(Stream::kCompute, 1.5e-6, 2.5e-3 - 1.5e-6, "fusion.3", "fusion", 300, 1e6)};
  c0.memory = {Mem(0, 1000, 500, 0, 0, 0), Mem(1e-6, 1000, 500, 1200, 0, 300),
               Mem(2e-3, 1000, 500, 0, 1000, 0)};
  DeviceClass c1;
  c1.label = "edge";
  c1.events = {Ev(Stream::kCompute, 0, 2e-6, "dot.1", "dot", 100, 2e9),
               Ev(Stream::kCommunication, 2e-6, 1e-6, "all-reduce.2", "all-reduce", 2048, 0)};
  c1.memory = {Mem(0, 1000, 500, 0, 0, 0), Mem(3e-6, 1000, 500, 50, 0, 0)};
  r.classes = {c0, c1};
  r.device_class = {0, 1, 0};
  return r;
}

QJsonDocument Parse(const std::string& json) {
  QJsonParseError err;
  QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(json), &err);
  if (err.error != QJsonParseError::NoError)
    qWarning("JSON parse error at %d: %s", err.offset, qPrintable(err.errorString()));
  return doc;
}

std::vector<QJsonObject> EventsWithPh(const QJsonDocument& doc, const char* ph) {
  std::vector<QJsonObject> out;
  for (const QJsonValue& v : doc.object().value("traceEvents").toArray()) {
    QJsonObject o = v.toObject();
    if (o.value("ph").toString() == QLatin1String(ph)) out.push_back(o);
  }
  return out;
}

// Minimal RFC 4180 reader: records of fields; quoted fields may hold commas, CR/LF and "".
// Returns false on malformed input (unterminated quote, text after a closing quote, bare CR/LF
// line ends that are not CRLF).
bool ParseCsv(const std::string& text, std::vector<std::vector<std::string>>& rows) {
  rows.clear();
  std::vector<std::string> row;
  std::string field;
  size_t i = 0;
  const size_t n = text.size();
  if (n == 0) return true;
  while (i < n) {
    if (text[i] == '"') {
      ++i;
      for (;;) {
        if (i >= n) return false;
        if (text[i] == '"') {
          if (i + 1 < n && text[i + 1] == '"') {
            field += '"';
            i += 2;
          } else {
            ++i;
            break;
          }
        } else {
          field += text[i++];
        }
      }
      if (i < n && text[i] != ',' && text[i] != '\r') return false;
    } else {
      while (i < n && text[i] != ',' && text[i] != '\r' && text[i] != '\n' && text[i] != '"') field += text[i++];
      if (i < n && (text[i] == '\n' || text[i] == '"')) return false;
    }
    if (i < n && text[i] == ',') {
      row.push_back(std::move(field));
      field.clear();
      ++i;
      continue;
    }
    // End of record: must be CRLF.
    if (i >= n || text[i] != '\r' || i + 1 >= n || text[i + 1] != '\n') return false;
    row.push_back(std::move(field));
    field.clear();
    rows.push_back(std::move(row));
    row.clear();
    i += 2;
  }
  return true;
}

}  // namespace

class TestTraceExport : public QObject {
  Q_OBJECT

 private slots:
  void csvFieldQuoting();
  void formatting();
  void chromeTraceStructure();
  void chromeTraceEventValues();
  void chromeTraceMemoryCounters();
  void chromeTraceEscapesNames();
  void chromeTraceSelection();
  void chromeTraceErrors();
  void chromeTraceToFile();
  void summaryCsv();
  void timelineCsv();
  void memoryCsv();
  void csvExportErrors();
};

void TestTraceExport::csvFieldQuoting() {
  QCOMPARE(CsvField("plain"), std::string("plain"));
  QCOMPARE(CsvField(""), std::string(""));
  QCOMPARE(CsvField("a,b"), std::string("\"a,b\""));
  QCOMPARE(CsvField("say \"hi\""), std::string("\"say \"\"hi\"\"\""));
  QCOMPARE(CsvField("two\nlines"), std::string("\"two\nlines\""));
  QCOMPARE(CsvField("cr\rx"), std::string("\"cr\rx\""));
  QCOMPARE(CsvField(" padded"), std::string("\" padded\""));
  QCOMPARE(CsvField("é;ü"), std::string("é;ü"));
}

void TestTraceExport::formatting() {
  QCOMPARE(FormatDouble(0.1), std::string("0.1"));
  QCOMPARE(FormatDouble(2.5e-3), std::string("0.0025"));
  QCOMPARE(FormatDouble(1e20), std::string("1e+20"));
  QCOMPARE(FormatDouble(std::nan("")), std::string("0"));
  const double tricky = 0.1 + 0.2;
  QCOMPARE(std::stod(FormatDouble(tricky)), tricky);  // shortest round trip
  QCOMPARE(FormatUtcTime(0), std::string("1970-01-01T00:00:00.000Z"));
  QCOMPARE(FormatUtcTime(1714564800123), std::string("2024-05-01T12:00:00.123Z"));
  QCOMPARE(FormatUtcTime(-1), std::string("1969-12-31T23:59:59.999Z"));
}

void TestTraceExport::chromeTraceStructure() {
  RunResult r = SmallRun();
  Result<std::string> json = ChromeTraceJson(r);
  QVERIFY2(json.ok(), json.ok() ? "" : json.error().message.c_str());
  QJsonDocument doc = Parse(*json);
  QVERIFY(doc.isObject());
  QJsonObject root = doc.object();
  QCOMPARE(root.value("displayTimeUnit").toString(), QString("ns"));
  QJsonObject other = root.value("otherData").toObject();
  QCOMPARE(other.value("module").toString(), QString("mlp"));
  QCOMPARE(other.value("chip").toString(), QString("TPU v4"));
  QCOMPARE(other.value("mesh").toString(), QString("X=3"));
  QCOMPARE(other.value("run_id").toInt(), 42);
  QCOMPARE(other.value("setting.microbatches").toString(), QString("2"));
  QCOMPARE(other.value("step_time_us").toDouble(), 2500.0);
  QCOMPARE(other.value("created").toString(), QString("2024-05-01T12:00:00.123Z"));

  const QJsonArray events = root.value("traceEvents").toArray();
  // Per device: process_name, process_sort_index, 2 x (thread_name, thread_sort_index) = 6 "M".
  // "X": devices 0, 2 have 3 events, device 1 has 2 -> 8. "C": 3 + 2 + 3 samples = 8.
  QCOMPARE(EventsWithPh(doc, "M").size(), size_t{18});
  QCOMPARE(EventsWithPh(doc, "X").size(), size_t{8});
  QCOMPARE(EventsWithPh(doc, "C").size(), size_t{8});
  QCOMPARE(events.size(), 34);

  std::map<std::pair<int, int>, QString> thread_names;
  std::map<int, QString> process_names;
  for (const QJsonObject& m : EventsWithPh(doc, "M")) {
    const QString name = m.value("name").toString();
    if (name == "process_name") process_names[m.value("pid").toInt()] = m.value("args").toObject().value("name").toString();
    if (name == "thread_name")
      thread_names[{m.value("pid").toInt(), m.value("tid").toInt()}] = m.value("args").toObject().value("name").toString();
    if (name == "process_sort_index")
      QCOMPARE(m.value("args").toObject().value("sort_index").toInt(), m.value("pid").toInt());
  }
  QCOMPARE(process_names.size(), size_t{3});
  QCOMPARE(process_names[0], QString("Device 0 (class 0: main)"));
  QCOMPARE(process_names[1], QString("Device 1 (class 1: edge)"));
  QCOMPARE(process_names[2], QString("Device 2 (class 0: main)"));
  QCOMPARE(thread_names.size(), size_t{6});
  for (int d = 0; d < 3; ++d) {
    QCOMPARE(thread_names[std::make_pair(d, 0)], QString("compute"));
    QCOMPARE(thread_names[std::make_pair(d, 1)], QString("communication"));
  }
}

void TestTraceExport::chromeTraceEventValues() {
  RunResult r = SmallRun();
  QJsonDocument doc = Parse(ChromeTraceJson(r).value());
  std::vector<QJsonObject> xs = EventsWithPh(doc, "X");
  // Events are written per device in order: device 0's three, device 1's two, device 2's three.
  QCOMPARE(xs.size(), size_t{8});
  const QJsonObject& ar = xs[1];  // device 0, all-reduce.2
  QCOMPARE(ar.value("pid").toInt(), 0);
  QCOMPARE(ar.value("tid").toInt(), 1);  // communication track
  QCOMPARE(ar.value("name").toString(), QString("all-reduce.2"));
  QCOMPARE(ar.value("cat").toString(), QString("communication"));
  QCOMPARE(ar.value("ts").toDouble(), 1.0);     // 1e-6 s = 1 us
  QCOMPARE(ar.value("dur").toDouble(), 2.25);   // 2.25e-6 s
  QCOMPARE(ar.value("args").toObject().value("kind").toString(), QString("all-reduce"));
  QCOMPARE(ar.value("args").toObject().value("bytes").toInt(), 2048);
  QCOMPARE(ar.value("args").toObject().value("flops").toDouble(), 0.0);

  const QJsonObject& dot = xs[0];
  QCOMPARE(dot.value("tid").toInt(), 0);  // compute track
  QCOMPARE(dot.value("ts").toDouble(), 0.0);
  QCOMPARE(dot.value("dur").toDouble(), 1.5);
  QCOMPARE(dot.value("args").toObject().value("flops").toDouble(), 2e9);

  const QJsonObject& fusion = xs[2];
  QCOMPARE(fusion.value("ts").toDouble(), 1.5);
  QCOMPARE(fusion.value("dur").toDouble(), 2498.5);  // (2.5e-3 - 1.5e-6) s in us, to the ns

  // Device 1 (class 1): its own events, pid 1.
  QCOMPARE(xs[3].value("pid").toInt(), 1);
  QCOMPARE(xs[3].value("dur").toDouble(), 2.0);
  QCOMPARE(xs[4].value("ts").toDouble(), 2.0);
  QCOMPARE(xs[4].value("tid").toInt(), 1);
  // Device 2 repeats class 0 with its own pid.
  QCOMPARE(xs[6].value("pid").toInt(), 2);
  QCOMPARE(xs[6].value("dur").toDouble(), 2.25);

  // Every "X" event has the complete set of fields.
  for (const QJsonObject& x : xs)
    for (const char* key : {"pid", "tid", "ts", "dur", "name", "cat", "args"}) QVERIFY2(x.contains(key), key);
}

void TestTraceExport::chromeTraceMemoryCounters() {
  RunResult r = SmallRun();
  QJsonDocument doc = Parse(ChromeTraceJson(r).value());
  std::vector<QJsonObject> cs = EventsWithPh(doc, "C");
  QCOMPARE(cs.size(), size_t{8});
  const QJsonObject& c = cs[1];  // device 0, sample at 1 us
  QCOMPARE(c.value("pid").toInt(), 0);
  QCOMPARE(c.value("name").toString(), QString("memory"));
  QCOMPARE(c.value("ts").toDouble(), 1.0);
  QJsonObject args = c.value("args").toObject();
  QCOMPARE(args.size(), 5);
  QCOMPARE(args.value("parameters").toInt(), 1000);
  QCOMPARE(args.value("optimizer_state").toInt(), 500);
  QCOMPARE(args.value("activations").toInt(), 1200);
  QCOMPARE(args.value("gradients").toInt(), 0);
  QCOMPARE(args.value("temporaries").toInt(), 300);
  QCOMPARE(cs[2].value("ts").toDouble(), 2000.0);  // 2e-3 s
  QCOMPARE(cs[4].value("pid").toInt(), 1);
  QCOMPARE(cs[4].value("args").toObject().value("activations").toInt(), 50);

  TraceExportOptions no_memory;
  no_memory.include_memory = false;
  QCOMPARE(EventsWithPh(Parse(ChromeTraceJson(r, no_memory).value()), "C").size(), size_t{0});
}

void TestTraceExport::chromeTraceEscapesNames() {
  RunResult r = SmallRun();
  const std::string nasty = std::string("q\"uote\\back\nnl\ttab\x01 é \xFF end");
  r.classes[1].events[0].instruction = nasty;
  r.classes[1].label = "lab\"el";
  r.inputs.module_name = "mod\\ule";
  Result<std::string> json = ChromeTraceJson(r);
  QVERIFY(json.ok());
  QJsonDocument doc = Parse(*json);
  QVERIFY(doc.isObject());
  std::vector<QJsonObject> xs = EventsWithPh(doc, "X");
  QCOMPARE(xs.size(), size_t{8});
  QCOMPARE(xs[3].value("name").toString(),
           QString::fromUtf8("q\"uote\\back\nnl\ttab\x01 é \xEF\xBF\xBD end"));
  QCOMPARE(doc.object().value("otherData").toObject().value("module").toString(), QString("mod\\ule"));
  bool found = false;
  for (const QJsonObject& m : EventsWithPh(doc, "M"))
    if (m.value("pid").toInt() == 1 && m.value("name").toString() == "process_name")
      found = m.value("args").toObject().value("name").toString() == QString("Device 1 (class 1: lab\"el)");
  QVERIFY(found);
}

void TestTraceExport::chromeTraceSelection() {
  RunResult r = SmallRun();
  TraceExportOptions o;
  o.selection.one_device_per_class = true;
  QJsonDocument doc = Parse(ChromeTraceJson(r, o).value());
  std::set<int> pids;
  for (const QJsonObject& x : EventsWithPh(doc, "X")) pids.insert(x.value("pid").toInt());
  QCOMPARE(pids, (std::set<int>{0, 1}));
  QCOMPARE(EventsWithPh(doc, "X").size(), size_t{5});

  o = {};
  o.selection.devices = {2, 2};
  doc = Parse(ChromeTraceJson(r, o).value());
  QCOMPARE(EventsWithPh(doc, "X").size(), size_t{3});
  QCOMPARE(EventsWithPh(doc, "M").size(), size_t{6});
  QCOMPARE(EventsWithPh(doc, "X")[0].value("pid").toInt(), 2);

  // Time window [1.2 us, 2 us): device 0: dot.1 (0-1.5) and all-reduce.2 (1-3.25) overlap, fusion.3
  // starts at 1.5 and overlaps too; device 1: dot.1 (0-2) overlaps, all-reduce.2 starts at 2: out.
  o = {};
  o.selection.devices = {0, 1};
  o.selection.start_s = 1.2e-6;
  o.selection.end_s = 2e-6;
  doc = Parse(ChromeTraceJson(r, o).value());
  std::vector<QJsonObject> xs = EventsWithPh(doc, "X");
  QCOMPARE(xs.size(), size_t{4});
  QCOMPARE(xs[3].value("pid").toInt(), 1);
  QCOMPARE(xs[3].value("name").toString(), QString("dot.1"));
  // Memory samples inside the window: none for device 0 (0, 1 us, 2000 us), none for device 1.
  QCOMPARE(EventsWithPh(doc, "C").size(), size_t{0});

  o.selection.start_s = 0;
  o.selection.end_s = 1.1e-6;
  QCOMPARE(EventsWithPh(Parse(ChromeTraceJson(r, o).value()), "C").size(), size_t{3});
}

void TestTraceExport::chromeTraceErrors() {
  RunResult r = SmallRun();
  TraceExportOptions o;
  o.selection.devices = {3};
  Result<std::string> bad_device = ChromeTraceJson(r, o);
  QVERIFY(!bad_device.ok());
  QVERIFY2(bad_device.error().message.find("device 3 is not in the run") != std::string::npos,
           bad_device.error().message.c_str());

  RunResult summary_only = r;
  summary_only.classes.clear();
  summary_only.device_class.clear();
  Result<std::string> no_detail = ChromeTraceJson(summary_only);
  QVERIFY(!no_detail.ok());
  QVERIFY(no_detail.error().message.find("no per-device detail") != std::string::npos);

  RunResult invalid = r;
  invalid.classes[0].events[0].duration_s = std::numeric_limits<double>::infinity();
  QVERIFY(!ChromeTraceJson(invalid).ok());

  o = {};
  o.selection.start_s = 2;
  o.selection.end_s = 1;
  QVERIFY(!ChromeTraceJson(r, o).ok());

  // A failing stream is reported, not ignored.
  std::ostringstream broken;
  broken.setstate(std::ios::badbit);
  QVERIFY(!WriteChromeTrace(r, broken).ok());
}

void TestTraceExport::chromeTraceToFile() {
  QTemporaryDir dir;
  const std::string path = (std::filesystem::path(dir.path().toStdString()) / "trace.json").string();
  RunResult r = SmallRun();
  QVERIFY(ExportChromeTrace(r, path).ok());
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  QCOMPARE(ss.str(), ChromeTraceJson(r).value());
  QVERIFY(!std::filesystem::exists(path + ".part"));
  Status bad = ExportChromeTrace(r, (std::filesystem::path(dir.path().toStdString()) / "no/dir/t.json").string());
  QVERIFY(!bad.ok());
  QVERIFY(bad.error().message.find("cannot write") != std::string::npos);
}

void TestTraceExport::summaryCsv() {
  RunResult a = SmallRun();
  a.label = "base, \"v1\"\nsecond line";
  RunResult b = SmallRun();
  b.id = 43;
  b.label = "b";
  b.summary.step_time_s = 0.1;
  b.inputs.settings.push_back({"overlap", "on"});
  std::ostringstream os;
  QVERIFY(WriteSummaryCsv({OverviewOf(a), OverviewOf(b)}, os).ok());
  const std::string text = os.str();
  QVERIFY(text.find("\"base, \"\"v1\"\"\nsecond line\"") != std::string::npos);
  std::vector<std::vector<std::string>> rows;
  QVERIFY(ParseCsv(text, rows));
  QCOMPARE(rows.size(), size_t{3});
  QCOMPARE(rows[0].size(), size_t{20});
  QCOMPARE(rows[0][0], std::string("id"));
  QCOMPARE(rows[0][11], std::string("step_time_s"));
  QCOMPARE(rows[0][17], std::string("peak_memory_bytes"));
  for (const auto& row : rows) QCOMPARE(row.size(), size_t{20});
  QCOMPARE(rows[1][0], std::string("42"));
  QCOMPARE(rows[1][1], std::string("2024-05-01T12:00:00.123Z"));
  QCOMPARE(rows[1][2], a.label);  // round trip through quoting
  QCOMPARE(rows[1][3], std::string("mlp"));
  QCOMPARE(rows[1][8], std::string("microbatches=2"));
  QCOMPARE(rows[1][9], std::string("3"));
  QCOMPARE(rows[1][10], std::string("2"));
  QCOMPARE(rows[1][11], std::string("0.0025"));
  QCOMPARE(rows[1][16], std::string("0.5"));
  QCOMPARE(rows[1][17], std::string("3000"));
  QCOMPARE(rows[1][18], std::string("6144"));
  QCOMPARE(rows[2][0], std::string("43"));
  QCOMPARE(rows[2][8], std::string("microbatches=2; overlap=on"));
  QCOMPARE(rows[2][11], std::string("0.1"));
}

void TestTraceExport::timelineCsv() {
  RunResult r = SmallRun();
  r.classes[0].events[2].instruction = "fusion,\"3\"";
  std::ostringstream os;
  QVERIFY(WriteTimelineCsv(r, os).ok());
  std::vector<std::vector<std::string>> rows;
  QVERIFY(ParseCsv(os.str(), rows));
  QCOMPARE(rows.size(), size_t{1 + 8});
  QCOMPARE(rows[0], (std::vector<std::string>{"device", "stream", "start_s", "duration_s", "end_s",
                                              "instruction", "kind", "bytes", "flops"}));
  QCOMPARE(rows[2], (std::vector<std::string>{"0", "communication", "1e-06", "2.25e-06",
                                              FormatDouble(1e-6 + 2.25e-6), "all-reduce.2", "all-reduce",
                                              "2048", "0"}));
  QCOMPARE(std::stod(rows[2][4]), 1e-6 + 2.25e-6);
  QCOMPARE(rows[3][5], std::string("fusion,\"3\""));
  QCOMPARE(rows[4][0], std::string("1"));
  QCOMPARE(rows[8][0], std::string("2"));
  QCOMPARE(std::stod(rows[1][8]), 2e9);

  ExportSelection sel;
  sel.devices = {1};
  std::ostringstream one;
  QVERIFY(WriteTimelineCsv(r, one, sel).ok());
  QVERIFY(ParseCsv(one.str(), rows));
  QCOMPARE(rows.size(), size_t{3});
  QCOMPARE(rows[1][4], std::string("2e-06"));
}

void TestTraceExport::memoryCsv() {
  RunResult r = SmallRun();
  std::ostringstream os;
  ExportSelection sel;
  sel.one_device_per_class = true;
  QVERIFY(WriteMemoryCsv(r, os, sel).ok());
  std::vector<std::vector<std::string>> rows;
  QVERIFY(ParseCsv(os.str(), rows));
  QCOMPARE(rows.size(), size_t{1 + 3 + 2});
  QCOMPARE(rows[0], (std::vector<std::string>{"device", "time_s", "parameters_bytes", "optimizer_state_bytes",
                                              "activations_bytes", "gradients_bytes", "temporaries_bytes",
                                              "total_bytes"}));
  QCOMPARE(rows[2], (std::vector<std::string>{"0", "1e-06", "1000", "500", "1200", "0", "300", "3000"}));
  QCOMPARE(rows[5][0], std::string("1"));
  QCOMPARE(rows[5][7], std::string("1550"));
}

void TestTraceExport::csvExportErrors() {
  QTemporaryDir dir;
  RunResult r = SmallRun();
  const std::string path = (std::filesystem::path(dir.path().toStdString()) / "t.csv").string();
  Status unknown = ExportCsv(r, "events", path);
  QVERIFY(!unknown.ok());
  QVERIFY(unknown.error().message.find("unknown CSV export 'events'") != std::string::npos);
  QVERIFY(ExportCsv(r, "timeline", path).ok());
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::vector<std::string>> rows;
  QVERIFY(ParseCsv(ss.str(), rows));
  QCOMPARE(rows.size(), size_t{9});
  QVERIFY(ExportCsv(r, "summary", path).ok());
  std::ifstream g(path, std::ios::binary);
  std::stringstream s2;
  s2 << g.rdbuf();
  QVERIFY(ParseCsv(s2.str(), rows));
  QCOMPARE(rows.size(), size_t{2});
  QCOMPARE(rows[1][2], std::string("baseline"));
  ExportSelection sel;
  sel.devices = {-1};
  QVERIFY(!ExportCsv(r, "memory", path, sel).ok());
}

QTEST_APPLESS_MAIN(TestTraceExport)
#include "test_trace_export.moc"
