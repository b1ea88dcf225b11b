#include "base/zip_writer.h"

#include <zlib.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace reckon::base {

namespace {

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xFF));
  out->push_back(static_cast<char>((v >> 8) & 0xFF));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xFFFF);
  Put16(out, v >> 16);
}

uint32_t Crc32(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t at = 0;
  while (at < bytes.size()) {  // zlib takes a uInt length
    const size_t n = std::min<size_t>(bytes.size() - at, size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

// 1980-01-01 00:00 in MS-DOS form: an export's bytes depend on the model
// alone, not on when it was written.
constexpr uint32_t kDosTime = 0, kDosDate = (1 << 5) | 1;  // year 0 (1980), month 1, day 1

// The fields a local header and its central directory entry share, from
// "version needed" to the extra field's length: stored, no flags, no extra.
void PutEntryFields(std::string* out, uint32_t crc, uint32_t size, size_t name_size) {
  Put16(out, 20);  // version needed: 2.0
  Put16(out, 0);   // flags
  Put16(out, 0);   // stored
  Put16(out, kDosTime);
  Put16(out, kDosDate);
  Put32(out, crc);
  Put32(out, size);  // compressed
  Put32(out, size);  // uncompressed
  Put16(out, static_cast<uint32_t>(name_size));
  Put16(out, 0);  // extra
}

}  // namespace

absl::StatusOr<std::string> StoredZip(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  constexpr uint64_t kLimit = uint64_t{0xFFFFFFFF};
  if (entries.size() >= 0xFFFF) {
    return absl::InvalidArgumentError(absl::StrCat(entries.size(), " zip entries: at most 65,534"));
  }
  uint64_t total = 22;
  for (const auto& [name, bytes] : entries) {
    if (name.empty() || name.size() > 0xFFFF) {
      return absl::InvalidArgumentError(absl::StrCat("zip entry name of ", name.size(), " bytes"));
    }
    total += 30 + 46 + 2 * name.size() + bytes.size();
  }
  if (total >= kLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("a zip of ", total, " bytes needs Zip64, which this writer does not make"));
  }
  std::string out, directory;
  out.reserve(total);
  for (const auto& [name, bytes] : entries) {
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t crc = Crc32(bytes);
    const uint32_t size = static_cast<uint32_t>(bytes.size());
    // Local file header.
    Put32(&out, 0x04034b50);
    PutEntryFields(&out, crc, size, name.size());
    out += name;
    out += bytes;
    // Its central directory entry.
    Put32(&directory, 0x02014b50);
    Put16(&directory, 20);  // made by: 2.0
    PutEntryFields(&directory, crc, size, name.size());
    Put16(&directory, 0);  // comment
    Put16(&directory, 0);  // disk
    Put16(&directory, 0);  // internal attributes
    Put32(&directory, 0);  // external attributes
    Put32(&directory, offset);
    directory += name;
  }
  const uint32_t directory_at = static_cast<uint32_t>(out.size());
  out += directory;
  Put32(&out, 0x06054b50);  // end of central directory
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, static_cast<uint32_t>(entries.size()));
  Put16(&out, static_cast<uint32_t>(entries.size()));
  Put32(&out, static_cast<uint32_t>(directory.size()));
  Put32(&out, directory_at);
  Put16(&out, 0);  // comment
  return out;
}

}  // namespace reckon::base
