// reckonctl bench show --from FILE: a kept figures file (the JSON a `reckonctl
// bench ... --json` printed, one object a line, or one JSON document such as
// `bench gpu`'s; or the CSV of `reckonctl compare --csv`) printed again as tables, so that every
// figure quoted in docs/benchmarks.md can be read back from the file beside it.
//
// Rows: each line of a JSON Lines file, or each element of a document's
// arrays of objects (its other fields, flattened, are printed above them).
// Nested objects are flattened into dotted names (`methods.cub-select.
// seconds`). Rows with the same names in the same order form one table,
// tables in the order their first row came. `--where name=value,...` keeps
// the rows whose field prints as that value (a comma in a value is kept when
// what follows it has no '='); `--columns a,b,...` prints
// those fields only, in that order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, from, "", "the figures file to print (bench show)");
ABSL_FLAG(std::vector<std::string>, where, {},
          "name=value,...: only the rows whose fields print so (bench show)");
ABSL_FLAG(std::vector<std::string>, columns, {},
          "the fields to print, in this order (bench show; default every one)");

namespace reckon::ctl {
namespace {

constexpr size_t kMaxFiguresBytes = size_t{64} << 20;

using Fields = std::vector<std::pair<std::string, std::string>>;  // name, printed value

// A number as the benches' tables print one: whole numbers in full, others
// with four significant digits.
std::string PrintNumber(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string PrintScalar(const base::Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_number()) return PrintNumber(v.get<double>());
  return v.dump();  // an array of scalars, as JSON
}

bool IsTable(const base::Json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const base::Json& e : v) {
    if (!e.is_object()) return false;
  }
  return true;
}

// Objects nest at most this deep: a file is read whole, but a name of a
// hundred thousand parts would take as many frames of Flatten's recursion.
constexpr int kMaxDepth = 32;

// `object`'s fields flattened under `prefix`; arrays of objects are not
// fields: they go to `tables` (by their dotted name) when it is given.
absl::Status Flatten(const base::Json& object, const std::string& prefix, Fields* fields,
                     std::vector<std::pair<std::string, const base::Json*>>* tables,
                     int depth = 0) {
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat("objects nested deeper than ", kMaxDepth,
                                                   " levels (at ", prefix.substr(0, 64), "...)"));
  }
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string name = prefix.empty() ? it.key() : absl::StrCat(prefix, ".", it.key());
    if (it.value().is_object()) {
      RECKON_RETURN_IF_ERROR(Flatten(it.value(), name, fields, tables, depth + 1));
    } else if (tables != nullptr && IsTable(it.value())) {
      tables->emplace_back(name, &it.value());
    } else {
      fields->emplace_back(name, PrintScalar(it.value()));
    }
  }
  return absl::OkStatus();
}

struct Filter {
  std::vector<std::pair<std::string, std::string>> where;
  std::vector<std::string> columns;
};

absl::StatusOr<Filter> ParseFilter() {
  Filter f;
  // The flag's list splits at every comma; a piece without '=' was part of
  // the value before it (`distribution=N(0,1)`).
  std::vector<std::string> conditions;
  for (const std::string& piece : absl::GetFlag(FLAGS_where)) {
    if (piece.find('=') == std::string::npos && !conditions.empty()) {
      absl::StrAppend(&conditions.back(), ",", piece);
    } else {
      conditions.push_back(piece);
    }
  }
  for (const std::string& w : conditions) {
    std::pair<std::string, std::string> kv = absl::StrSplit(w, absl::MaxSplits('=', 1));
    if (kv.first.empty() || w.find('=') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--where '", w, "' is not name=value"));
    }
    f.where.push_back(std::move(kv));
  }
  f.columns = absl::GetFlag(FLAGS_columns);
  return f;
}

const std::string* Find(const Fields& row, const std::string& name) {
  for (const auto& [n, v] : row) {
    if (n == name) return &v;
  }
  return nullptr;
}

bool Kept(const Fields& row, const Filter& f) {
  for (const auto& [name, value] : f.where) {
    const std::string* v = Find(row, name);
    if (v == nullptr || *v != value) return false;
  }
  return true;
}

// Prints `rows` grouped into tables by their names; returns how many were
// printed.
size_t PrintTables(const std::vector<Fields>& rows, const Filter& f, std::ostream& out) {
  std::vector<std::pair<std::vector<std::string>, std::vector<std::vector<std::string>>>> tables;
  std::map<std::vector<std::string>, size_t> by_names;
  size_t printed = 0;
  for (const Fields& row : rows) {
    if (!Kept(row, f)) continue;
    std::vector<std::string> names, values;
    if (f.columns.empty()) {
      for (const auto& [n, v] : row) {
        names.push_back(n);
        values.push_back(v);
      }
    } else {
      for (const std::string& c : f.columns) {
        const std::string* v = Find(row, c);
        if (v == nullptr) continue;
        names.push_back(c);
        values.push_back(*v);
      }
      if (names.empty()) continue;
    }
    auto [it, added] = by_names.emplace(names, tables.size());
    if (added) tables.push_back({names, {}});
    tables[it->second].second.push_back(std::move(values));
    ++printed;
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto& [names, values] = tables[t];
    std::vector<size_t> width(names.size());
    for (size_t c = 0; c < names.size(); ++c) {
      width[c] = names[c].size();
      for (const auto& r : values) width[c] = std::max(width[c], r[c].size());
    }
    if (t > 0) out << "\n";
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s;
      for (size_t c = 0; c < cells.size(); ++c) {
        if (c > 0) s += "  ";
        s += cells[c] + std::string(width[c] - cells[c].size(), ' ');
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out << s << "\n";
    };
    line(names);
    for (const auto& r : values) line(r);
  }
  return printed;
}

// A CSV line's fields at most: compare writes 13 or 15; a file of 64 MiB of
// commas would otherwise be 64 million strings.
constexpr size_t kMaxCsvFields = 1024;

// The rows of a CSV file as `reckonctl compare --csv` writes one: the first
// line names the fields, every other line is a row of as many fields, split
// at every comma (compare quotes nothing: no field of its holds a comma).
absl::Status ReadCsv(const std::string& text, const std::string& path, std::vector<Fields>* rows) {
  std::vector<std::string> names;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripTrailingAsciiWhitespace(line);  // a CRLF file's \r too
    if (line.empty()) continue;
    if (static_cast<size_t>(std::count(line.begin(), line.end(), ',')) >= kMaxCsvFields) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", line_number, " has more than ", kMaxCsvFields, " fields"));
    }
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (names.empty()) {
      names = std::move(cells);
      continue;
    }
    if (cells.size() != names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", line_number, " has ",
                                                     cells.size(), " fields, its header ",
                                                     names.size()));
    }
    Fields row;
    for (size_t c = 0; c < cells.size(); ++c) row.emplace_back(names[c], std::move(cells[c]));
    rows->push_back(std::move(row));
  }
  return absl::OkStatus();
}

// The rows of a JSON document or a JSON Lines file (the document's fields
// beside its arrays of objects printed on `out` first).
absl::Status ReadJson(const std::string& text, const std::string& path, std::vector<Fields>* rows,
                      std::ostream& out) {
  // One JSON document, or JSON Lines: the document is tried first. A
  // document with arrays of objects prints its other fields above their
  // rows; one without is a single row (a JSON Lines file of one line).
  absl::StatusOr<base::Json> whole = base::ParseJson(text, path);
  if (whole.ok() && whole->is_object()) {
    Fields header;
    std::vector<std::pair<std::string, const base::Json*>> tables;
    RECKON_RETURN_IF_ERROR(Flatten(*whole, "", &header, &tables));
    if (tables.empty()) {
      rows->push_back(std::move(header));
    } else {
      for (const auto& [name, value] : header) out << name << ": " << value << "\n";
      out << "\n";
      for (const auto& [name, array] : tables) {
        for (const base::Json& e : *array) {
          Fields row = {{"table", name}};
          RECKON_RETURN_IF_ERROR(Flatten(e, "", &row, nullptr));
          rows->push_back(std::move(row));
        }
      }
    }
  } else if (whole.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  } else {
    int line_number = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++line_number;
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      absl::StatusOr<base::Json> row =
          base::ParseJson(line, absl::StrCat(path, " line ", line_number));
      if (!row.ok()) return row.status();
      if (!row->is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " line ", line_number, " is not a JSON object"));
      }
      Fields fields;
      RECKON_RETURN_IF_ERROR(Flatten(*row, "", &fields, nullptr));
      rows->push_back(std::move(fields));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> Show(const std::string& path, const Filter& f, std::ostream& out) {
  absl::StatusOr<std::string> text = base::ReadFile(path, kMaxFiguresBytes);
  if (!text.ok()) return text.status();
  std::vector<Fields> rows;
  RECKON_RETURN_IF_ERROR(path.ends_with(".csv") ? ReadCsv(*text, path, &rows)
                                                : ReadJson(*text, path, &rows, out));
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no figures"));
  for (const auto& [name, value] : f.where) {
    bool named = false;
    for (const Fields& r : rows) named = named || Find(r, name) != nullptr;
    if (!named) {
      return absl::InvalidArgumentError(
          absl::StrCat("--where names '", name, "', which no row of ", path, " has"));
    }
  }
  return PrintTables(rows, f, out);
}

}  // namespace

int RunBenchShow(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl bench show",
                              {{"from", "", /*required=*/true}, {"where"}, {"columns"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  absl::StatusOr<Filter> filter = ParseFilter();
  if (!filter.ok()) {
    err << "reckonctl bench show: " << filter.status().message() << "\n";
    return kExitUsage;
  }
  std::ostringstream table;
  absl::StatusOr<size_t> printed = Show(absl::GetFlag(FLAGS_from), *filter, table);
  if (!printed.ok()) {
    err << "reckonctl bench show: " << printed.status().message() << "\n";
    return kExitFailed;
  }
  if (*printed == 0 && !filter->where.empty()) {
    err << "reckonctl bench show: no row of " << absl::GetFlag(FLAGS_from) << " matches --where\n";
    return kExitFailed;
  }
  out << table.str();
  return kExitOk;
}

}  // namespace reckon::ctl
