// docs/api.md against the running server's /openapi.json, so that the two cannot drift: the
// operations (method + path) must be the same on both sides; every status code /openapi.json lists
// for an operation must be in docs/api.md's "in /openapi.json" column, and that column must list
// nothing /openapi.json lacks. The doc's last column holds codes the server returns that
// /openapi.json does not list yet; a code there that /openapi.json gains is still documented (the
// test says so, and the doc should move it to the third column).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "shared_server.h"

namespace clef::server_test {
namespace {

using json = nlohmann::ordered_json;
using Op = std::pair<std::string, std::string>;  // METHOD, path

struct DocRow {
  std::set<std::string> in_openapi;
  std::set<std::string> not_in_openapi;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t`"), e = s.find_last_not_of(" \t`\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::set<std::string> codes(const std::string& cell) {
  std::set<std::string> out;
  std::stringstream ss(cell);
  std::string part;
  while (std::getline(ss, part, ',')) {
    part = trim(part);
    if (!part.empty()) out.insert(part);
  }
  return out;
}

// The table between <!-- api-contract:begin --> and <!-- api-contract:end --> in docs/api.md.
std::map<Op, DocRow> doc_table(std::string* error) {
  std::ifstream in(std::string(CLEF_SOURCE_DIR) + "/docs/api.md");
  if (!in) {
    *error = "docs/api.md not readable";
    return {};
  }
  std::map<Op, DocRow> rows;
  std::string line;
  bool inside = false, seen_end = false;
  int table_lines = 0;
  while (std::getline(in, line)) {
    if (line.find("<!-- api-contract:begin -->") != std::string::npos) {
      inside = true;
      continue;
    }
    if (line.find("<!-- api-contract:end -->") != std::string::npos) {
      seen_end = inside;
      break;
    }
    if (!inside || trim(line).empty()) continue;
    if (line.front() != '|') {
      *error = "non-table line inside the contract table: " + line;
      return {};
    }
    if (++table_lines <= 2) continue;  // column names, separator
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(trim(cell));
    if (cells.size() == 5 && cells.back().empty()) cells.pop_back();  // text after the last |
    if (cells.size() == 3) cells.emplace_back();                      // an empty last column
    if (cells.size() != 4) {
      *error = "contract row without 4 cells: " + line;
      return {};
    }
    Op op{cells[0], cells[1]};
    if (rows.count(op)) {
      *error = "operation twice in the contract table: " + cells[0] + " " + cells[1];
      return {};
    }
    rows[op] = DocRow{codes(cells[2]), codes(cells[3])};
  }
  if (!seen_end) *error = "docs/api.md has no complete <!-- api-contract:begin/end --> table";
  return rows;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

TEST(ApiContract, DocsApiMdMatchesOpenApiJson) {
  std::string error;
  const std::map<Op, DocRow> doc = doc_table(&error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_FALSE(doc.empty()) << "the contract table in docs/api.md is empty";

  HttpResponse r = http(shared_port(), "GET", "/openapi.json");
  ASSERT_EQ(r.status, 200) << r.body;
  const json spec = r.json();
  ASSERT_TRUE(spec.is_object() && spec.contains("paths")) << r.body;

  std::map<Op, std::set<std::string>> api;
  static const std::set<std::string> kMethods = {"get",     "put",  "post",  "delete",
                                                 "options", "head", "patch", "trace"};
  for (auto p = spec["paths"].begin(); p != spec["paths"].end(); ++p) {
    for (auto m = p.value().begin(); m != p.value().end(); ++m) {
      if (!kMethods.count(m.key())) continue;  // parameters, summary, ...
      std::string method = m.key();
      for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      std::set<std::string> statuses;
      if (m.value().contains("responses"))
        for (auto s = m.value()["responses"].begin(); s != m.value()["responses"].end(); ++s)
          statuses.insert(s.key());
      api[{method, p.key()}] = statuses;
    }
  }
  ASSERT_FALSE(api.empty());

  for (const auto& [op, statuses] : api) {
    SCOPED_TRACE(op.first + " " + op.second);
    auto it = doc.find(op);
    if (it == doc.end()) {
      ADD_FAILURE() << "operation in /openapi.json but not in docs/api.md's contract table";
      continue;
    }
    std::set<std::string> undocumented, pending, doc_only;
    for (const auto& s : statuses) {
      if (it->second.in_openapi.count(s)) continue;
      (it->second.not_in_openapi.count(s) ? pending : undocumented).insert(s);
    }
    for (const auto& s : it->second.in_openapi)
      if (!statuses.count(s)) doc_only.insert(s);
    EXPECT_TRUE(undocumented.empty())
        << "/openapi.json lists status " << join(undocumented) << ", docs/api.md does not";
    EXPECT_TRUE(doc_only.empty()) << "docs/api.md says /openapi.json lists " << join(doc_only)
                                  << ", it does not";
    EXPECT_TRUE(pending.empty()) << "/openapi.json now lists " << join(pending)
                                 << ": move them to the 'in /openapi.json' column of docs/api.md";
    std::set<std::string> both;
    for (const auto& s : it->second.in_openapi)
      if (it->second.not_in_openapi.count(s)) both.insert(s);
    EXPECT_TRUE(both.empty()) << "docs/api.md lists " << join(both) << " in both columns";
  }
  for (const auto& [op, row] : doc)
    EXPECT_TRUE(api.count(op)) << "docs/api.md's contract table has " << op.first << " "
                               << op.second << ", /openapi.json does not";
}

// Every code in the doc's contract table is a code the status table of docs/api.md explains.
TEST(ApiContract, EveryTableCodeIsExplained) {
  std::string error;
  const std::map<Op, DocRow> doc = doc_table(&error);
  ASSERT_TRUE(error.empty()) << error;
  std::ifstream in(std::string(CLEF_SOURCE_DIR) + "/docs/api.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  for (const auto& [op, row] : doc) {
    std::set<std::string> all = row.in_openapi;
    all.insert(row.not_in_openapi.begin(), row.not_in_openapi.end());
    for (const auto& s : all)
      EXPECT_NE(text.find("\n| " + s + " | "), std::string::npos)
          << op.first << " " << op.second << ": status " << s
          << " has no row in docs/api.md's per-code table";
  }
}

}  // namespace
}  // namespace clef::server_test
