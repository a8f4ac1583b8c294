// The JSON reader and writer (core/base/json.h): values, positions, escapes, errors with
// LINE:COLUMN and byte offset, the depth limit, and the writer reading back as the same value.
#include <QJsonArray>
#include <QJsonDocument>
#include <QtTest>

#include <string>

#include "core/base/json.h"

using namespace shardscope;

namespace {

json::Value MustParse(std::string_view text) {
  auto v = json::Parse(text);
  if (!v.ok()) qFatal("%s", v.error().message.c_str());
  return std::move(v).value();
}

}  // namespace

class TestJson : public QObject {
  Q_OBJECT

 private slots:
  void valuesAndOrderedMembers() {
    const auto v = MustParse(R"({"z": 1, "a": [true, false, null], "m": {"k": "v"}, "n": -2.5e3})");
    QVERIFY(v.is_object());
    QCOMPARE(v.members().size(), size_t{4});
    // Members keep the order of the text, not sorted.
    QCOMPARE(v.members()[0].key, std::string("z"));
    QCOMPARE(v.members()[1].key, std::string("a"));
    QCOMPARE(v.members()[2].key, std::string("m"));
    QCOMPARE(v.Find("z")->AsInt64().value(), int64_t{1});
    const auto& a = v.Find("a")->items();
    QCOMPARE(a.size(), size_t{3});
    QVERIFY(a[0].is_bool() && a[0].boolean());
    QVERIFY(a[1].is_bool() && !a[1].boolean());
    QVERIFY(a[2].is_null());
    QCOMPARE(v.Find("m")->Find("k")->string(), std::string("v"));
    QCOMPARE(v.Find("n")->number(), -2500.0);
    QCOMPARE(v.Find("n")->AsInt64().value(), int64_t{-2500});
    QVERIFY(v.Find("missing") == nullptr);
    QVERIFY(v.Find("m")->Find("k")->Find("x") == nullptr);  // not an object
  }

  void integersBeyondDoublePrecision() {
    const auto v = MustParse("[9007199254740993, -9223372036854775808, 18446744073709551616, 1.5, 1e2]");
    QCOMPARE(v.items()[0].AsInt64().value(), int64_t{9007199254740993});  // 2^53 + 1, exact
    QCOMPARE(v.items()[1].AsInt64().value(), std::numeric_limits<int64_t>::min());
    QVERIFY(!v.items()[2].AsInt64().has_value());  // 2^64: a number, but not an int64
    QCOMPARE(v.items()[2].number(), 18446744073709551616.0);
    QVERIFY(!v.items()[3].AsInt64().has_value());
    QCOMPARE(v.items()[4].AsInt64().value(), int64_t{100});
  }

  void positionsOfValuesAndKeys() {
    const std::string text = "{\n  \"a\": 1,\n  \"bb\":\t[2,\n    \"x\"]\n}";
    const auto v = MustParse(text);
    QCOMPARE(v.position().line, int64_t{1});
    QCOMPARE(v.position().column, int64_t{1});
    const json::Member* a = v.FindMember("a");
    QCOMPARE(a->position.line, int64_t{2});
    QCOMPARE(a->position.column, int64_t{3});
    QCOMPARE(a->value.position().column, int64_t{8});
    const json::Member* bb = v.FindMember("bb");
    QCOMPARE(bb->value.position().line, int64_t{3});
    QCOMPARE(bb->value.position().column, int64_t{9});  // the tab counts as one column
    const json::Value& x = bb->value.items()[1];
    QCOMPARE(x.position().line, int64_t{4});
    QCOMPARE(x.position().column, int64_t{5});
    QCOMPARE(x.position().offset, int64_t(text.find("\"x\"")));
    const Error e = json::ErrorAt(x.position(), "must be a number");
    QCOMPARE(e.message, std::string("4:5: must be a number"));
    QCOMPARE(e.offset, int64_t(text.find("\"x\"")));
  }

  void stringEscapes() {
    const auto v = MustParse(
        "[\"a\\\"b\\\\c\\/d\", \"\\b\\f\\n\\r\\t\", \"\\u0041\\u00e9\\u20AC\", \"\\ud834\\udd1e\", "
        "\"caf\\u00E9 \\u00000\"]");
    QCOMPARE(v.items()[0].string(), std::string("a\"b\\c/d"));
    QCOMPARE(v.items()[1].string(), std::string("\b\f\n\r\t"));
    QCOMPARE(v.items()[2].string(), std::string("A\xC3\xA9\xE2\x82\xAC"));  // A, e-acute, euro sign
    QCOMPARE(v.items()[3].string(), std::string("\xF0\x9D\x84\x9E"));      // U+1D11E from a surrogate pair
    QCOMPARE(v.items()[4].string(), std::string("caf\xC3\xA9 \0" "0", 8));
    // Raw UTF-8 passes through.
    QCOMPARE(MustParse("\"\xE2\x86\x92\"").string(), std::string("\xE2\x86\x92"));
  }

  void errorsCarryLineColumnAndOffset_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");
    QTest::addColumn<int>("offset");
    QTest::newRow("empty") << "" << "1:1: expected a value" << 0;
    QTest::newRow("missing colon") << "{\n  \"k\" 1}" << "2:7: expected ':' after the key \"k\", found '1'" << 8;
    QTest::newRow("missing comma") << "[1 2]" << "1:4: expected ',' or ']' after an array element, found '2'" << 3;
    QTest::newRow("trailing comma") << "[1,]" << "1:4: expected a value" << 3;
    QTest::newRow("object trailing comma") << "{\"a\":1,}" << "1:8: expected a quoted key, found '}'" << 7;
    QTest::newRow("unquoted key") << "{a: 1}" << "1:2: expected a quoted key, found 'a'" << 1;
    QTest::newRow("unclosed object") << "{\"a\": 1" << "1:8: expected ',' or '}' after an object member, found the end of the text" << 7;
    QTest::newRow("duplicate") << "{\"a\": 1,\n \"a\": 2}" << "2:2: duplicate key \"a\" (first at 1:2)" << 10;
    QTest::newRow("leading zero") << "[01]" << "1:2: malformed number '01'" << 1;
    QTest::newRow("bare minus") << "-" << "1:1: malformed number '-'" << 0;
    QTest::newRow("dangling exponent") << "[1e-]" << "1:2: malformed number '1e-'" << 1;
    QTest::newRow("dot without digits") << "1." << "1:1: malformed number '1.'" << 0;
    QTest::newRow("huge") << "1e999" << "1:1: number out of range '1e999'" << 0;
    QTest::newRow("unterminated") << "[\"abc" << "1:2: unterminated string" << 1;
    QTest::newRow("newline in string") << "\"a\nb\"" << "1:3: unterminated string" << 2;
    QTest::newRow("control byte") << "\"a\x01\"" << "1:3: control character byte 0x01 inside a string" << 2;
    QTest::newRow("bad escape") << "\"\\q\"" << "1:2: unknown escape '\\q'" << 1;
    QTest::newRow("bad hex") << "\"\\u12G4\"" << "1:6: expected a hex digit in the \\u escape, found 'G'" << 5;
    QTest::newRow("short hex") << "\"\\u12" << "1:2: incomplete \\u escape" << 1;
    QTest::newRow("lone high surrogate") << "\"\\ud834x\"" << "1:2: unpaired high surrogate" << 1;
    QTest::newRow("lone low surrogate") << "\"\\udd1e\"" << "1:2: unpaired low surrogate" << 1;
    QTest::newRow("high then non-low") << "\"\\ud834\\u0041\"" << "1:8: expected a low surrogate" << 7;
    QTest::newRow("trailing text") << "{} x" << "1:4: unexpected text after the JSON value, found 'x'" << 3;
    QTest::newRow("bad literal") << "[tru]" << "1:2: expected a value (object, array, string, number, true, false or null), found 't'" << 1;
    QTest::newRow("comment") << "// c\n{}" << "1:1: expected a value" << 0;
  }
  void errorsCarryLineColumnAndOffset() {
    QFETCH(QString, text);
    QFETCH(QString, expected);
    QFETCH(int, offset);
    const std::string t = text.toStdString();
    auto v = json::Parse(t);
    QVERIFY(!v.ok());
    QVERIFY2(v.error().message.find(expected.toStdString()) != std::string::npos, v.error().message.c_str());
    QCOMPARE(v.error().offset, int64_t{offset});
  }

  void binaryInputNamesTheByte() {
    auto v = json::Parse(std::string("\x80\x00", 2));
    QVERIFY(!v.ok());
    QCOMPARE(v.error().message, std::string("1:1: expected a value (object, array, string, number, true, false or null), found byte 0x80"));
  }

  // JSON text is UTF-8: a string with a byte that starts no valid sequence is an error (the writer
  // could not write it back), valid multi-byte sequences pass through.
  void invalidUtf8InStrings() {
    for (const std::string& bad : {std::string("[\"a\x80\"]"), std::string("[\"\xC3\"]"), std::string("[\"\xED\xA0\x80\"]"),
                                   std::string("[\"\xC0\xAF\"]")}) {
      auto v = json::Parse(bad);
      QVERIFY(!v.ok());
      QVERIFY2(v.error().message.find("invalid UTF-8") != std::string::npos, v.error().message.c_str());
    }
    auto v = json::Parse("[\"a\x80\"]");
    QCOMPARE(v.error().message, std::string("1:4: invalid UTF-8 (byte 0x80) inside a string"));
    QCOMPARE(MustParse("\"\xF0\x9D\x84\x9E\"").string(), std::string("\xF0\x9D\x84\x9E"));
  }

  void duplicateKeysWhenAllowed() {
    json::ParseOptions o;
    o.allow_duplicate_keys = true;
    auto v = json::Parse(R"({"a": 1, "a": 2})", o);
    QVERIFY(v.ok());
    QCOMPARE(v->members().size(), size_t{2});
    QCOMPARE(v->Find("a")->AsInt64().value(), int64_t{1});  // the first one
  }

  // Deep nesting is an error with a position, never a stack overflow.
  void depthLimit() {
    const std::string deep(200000, '[');
    auto v = json::Parse(deep);
    QVERIFY(!v.ok());
    QCOMPARE(v.error().message, std::string("1:257: nesting deeper than 256 levels"));
    json::ParseOptions o;
    o.max_depth = 3;
    QVERIFY(json::Parse("[[[1]]]", o).ok());
    QVERIFY(!json::Parse("[[[[1]]]]", o).ok());
    QVERIFY(!json::Parse(R"({"a":{"b":{"c":{}}}})", o).ok());
  }

  void quoting() {
    QCOMPARE(json::Quote("plain"), std::string("\"plain\""));
    QCOMPARE(json::Quote("a\"b\\c"), std::string("\"a\\\"b\\\\c\""));
    QCOMPARE(json::Quote("l1\nl2\tx\r\b\f"), std::string("\"l1\\nl2\\tx\\r\\b\\f\""));
    QCOMPARE(json::Quote(std::string("\x01\x1f", 2)), std::string("\"\\u0001\\u001f\""));
    QCOMPARE(json::Quote(std::string("nul\0x", 5)), std::string("\"nul\\u0000x\""));
    QCOMPARE(json::Quote("\xC3\xA9\xE2\x86\x92\xF0\x9D\x84\x9E"), std::string("\"\xC3\xA9\xE2\x86\x92\xF0\x9D\x84\x9E\""));
    // Invalid UTF-8: every bad byte becomes U+FFFD.
    QCOMPARE(json::Quote("a\x80z"), std::string("\"a\xEF\xBF\xBDz\""));
    QCOMPARE(json::Quote("\xC3"), std::string("\"\xEF\xBF\xBD\""));
    QCOMPARE(json::Quote("\xC0\xAF"), std::string("\"\xEF\xBF\xBD\xEF\xBF\xBD\""));
    QCOMPARE(json::Quote("\xED\xA0\x80"), std::string("\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\""));
    // What is quoted reads back as the same string, here and in an independent reader (Qt's).
    for (const std::string& s : {std::string("x\"\\\n\t\x01y"), std::string("\xF0\x9D\x84\x9E z"), std::string("\0", 1),
                                 std::string("\\\\"), std::string("\xC3\xA9")}) {
      const std::string quoted = json::Quote(s);
      QCOMPARE(MustParse(quoted).string(), s);
      QByteArray array("[");
      array.append(quoted.data(), qsizetype(quoted.size())).append(']');
      const QJsonDocument d = QJsonDocument::fromJson(array);
      QVERIFY(d.isArray());
      QCOMPARE(d.array().at(0).toString(), QString::fromUtf8(s.data(), qsizetype(s.size())));
    }
  }

  void serializeReadsBackEqual() {
    const std::string text =
        R"({"name": "v\u00e9", "n": [0, -1, 0.1, 1e+20, 123456789012345678, 2.5e-7], "o": {}, "a": [], "t": true, "z": null})";
    const auto v = MustParse(text);
    const std::string compact = json::Serialize(v);
    QCOMPARE(compact, std::string("{\"name\":\"v\xC3\xA9\",\"n\":[0,-1,0.1,1e+20,123456789012345678,2.5e-07],"
                                  "\"o\":{},\"a\":[],\"t\":true,\"z\":null}"));
    QCOMPARE(MustParse(compact), v);
    const std::string pretty = json::Serialize(v, 2);
    QVERIFY(pretty.find("\n  \"n\": [\n    0,") != std::string::npos);
    QCOMPARE(MustParse(pretty), v);
    // Member order matters for equality; positions do not.
    QVERIFY(MustParse(R"({"a":1,"b":2})") != MustParse(R"({"b":2,"a":1})"));
    QVERIFY(MustParse("[1, 2]") == MustParse("[\n1,\n 2]"));
    QVERIFY(MustParse("1") == MustParse("1.0"));
    // Built values.
    std::vector<json::Member> members;
    members.push_back({"k", {}, json::Value::Array({json::Value::Integer(3), json::Value::String("s")})});
    QCOMPARE(json::Serialize(json::Value::Object(std::move(members))), std::string(R"({"k":[3,"s"]})"));
    QCOMPARE(json::Serialize(json::Value::Number(std::numeric_limits<double>::infinity())), std::string("null"));
  }
};

QTEST_APPLESS_MAIN(TestJson)
#include "test_json.moc"
