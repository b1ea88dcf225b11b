#include "worker/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reckon::worker {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// The type a 'descr' names, or why this reader does not take it.
absl::StatusOr<NpyType> TypeOf(const std::string& descr, const std::string& path) {
  if (descr.size() < 3) return Bad(path, absl::StrCat("type '", descr, "' is not a NumPy type"));
  const char order = descr[0];
  const std::string code = descr.substr(1);
  struct Known {
    std::string_view code;
    NpyType type;
  };
  static constexpr Known kKnown[] = {{"f4", NpyType::kFloat32}, {"f2", NpyType::kFloat16},
                                     {"u1", NpyType::kUint8},   {"i1", NpyType::kInt8},
                                     {"i2", NpyType::kInt16},   {"u2", NpyType::kUint16},
                                     {"i4", NpyType::kInt32},   {"u4", NpyType::kUint32},
                                     {"i8", NpyType::kInt64},   {"u8", NpyType::kUint64}};
  std::optional<NpyType> type;
  for (const Known& k : kKnown) {
    if (k.code == code) type = k.type;
  }
  if (!type) {
    if (code == "f8") {
      return Bad(path, "float64 is not taken: save it as float32 (x.astype('float32'))");
    }
    return Bad(path, absl::StrCat("type '", descr,
                                  "' is not taken (features: float32, float16 or uint8; "
                                  "labels: an integer type)"));
  }
  const bool one_byte = NpyTypeSize(*type) == 1;
  if (order == '>' && !one_byte) {
    return Bad(path,
               absl::StrCat("type '", descr, "' is big-endian: save it little-endian (x.astype('<",
                            code, "'))"));
  }
  if (order != '<' && order != '|' && order != '=' && !(order == '>' && one_byte)) {
    return Bad(path, absl::StrCat("type '", descr, "' has no byte order NumPy writes"));
  }
  return *type;
}

// The header's dictionary, as numpy writes it: {'descr': '<f4',
// 'fortran_order': False, 'shape': (2, 3), } (either quote; spaces
// anywhere between tokens; a trailing comma in the tuple and the dict).
class DictionaryParser {
 public:
  DictionaryParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool have_descr = false, have_order = false, have_shape = false;
    if (!Eat('{')) return Fault("the dictionary does not start with '{'");
    while (!Eat('}')) {
      std::string key;
      if (!String(&key)) return Fault("a key is not a quoted string");
      if (!Eat(':')) return Fault(absl::StrCat("no ':' after key '", key, "'"));
      if (key == "descr") {
        std::string descr;
        if (!String(&descr)) return Fault("'descr' is not a quoted string");
        absl::StatusOr<NpyType> type = TypeOf(descr, path_);
        if (!type.ok()) return type.status();
        header.type = *type;
        have_descr = true;
      } else if (key == "fortran_order") {
        bool fortran = false;
        if (Word("True")) {
          fortran = true;
        } else if (!Word("False")) {
          return Fault("'fortran_order' is neither True nor False");
        }
        if (fortran) {
          return Bad(path_,
                     "the array is in Fortran order: save it in C order "
                     "(numpy.ascontiguousarray(x))");
        }
        have_order = true;
      } else if (key == "shape") {
        if (!Shape(&header.shape)) return Fault("'shape' is not a tuple of integers");
        have_shape = true;
      } else {
        return Fault(absl::StrCat("unknown key '", key.substr(0, 40), "'"));
      }
      if (!Eat(',')) {
        if (!Eat('}')) return Fault("the dictionary does not end with '}'");
        break;
      }
    }
    if (!have_descr || !have_order || !have_shape) {
      return Fault(absl::StrCat("the dictionary lacks ", !have_descr   ? "'descr'"
                                                         : !have_order ? "'fortran_order'"
                                                                       : "'shape'"));
    }
    Skip();
    if (at_ != s_.size()) return Fault("something follows the dictionary");
    return header;
  }

 private:
  absl::Status Fault(const std::string& what) {
    return Bad(path_, absl::StrCat("bad .npy header: ", what));
  }
  void Skip() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\t')) ++at_;
  }
  bool Eat(char c) {
    Skip();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    Skip();
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }
  bool String(std::string* out) {
    Skip();
    if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) return false;
    const char quote = s_[at_++];
    const size_t end = s_.find(quote, at_);
    if (end == std::string_view::npos || end - at_ > 64) return false;
    *out = std::string(s_.substr(at_, end - at_));
    at_ = end + 1;
    return true;
  }
  // (), (n,), (n, m, ...): at most 8 dimensions, each below 2^62.
  bool Shape(std::vector<uint64_t>* shape) {
    if (!Eat('(')) return false;
    while (!Eat(')')) {
      Skip();
      uint64_t value = 0;
      size_t digits = 0;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') {
        if (++digits > 18) return false;
        value = value * 10 + static_cast<uint64_t>(s_[at_++] - '0');
      }
      if (digits == 0 || shape->size() == 8) return false;
      if (at_ < s_.size() && s_[at_] == 'L') ++at_;  // Python 2's long
      shape->push_back(value);
      if (!Eat(',')) return Eat(')');
    }
    return true;
  }

  std::string_view s_;
  const std::string& path_;
  size_t at_ = 0;
};

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian, as checked
  return v;
}

// The element at `p`, of `type`, converted as NpyFile::FloatAt and
// IntegerAt say.
int64_t IntegerOf(const uint8_t* p, NpyType type);

float FloatOf(const uint8_t* p, NpyType type) {
  switch (type) {
    case NpyType::kFloat32:
      return Load<float>(p);
    case NpyType::kFloat16:
      return HalfToFloat(Load<uint16_t>(p));
    default:
      return static_cast<float>(IntegerOf(p, type));
  }
}

int64_t IntegerOf(const uint8_t* p, NpyType type) {
  switch (type) {
    case NpyType::kUint8:
      return *p;
    case NpyType::kInt8:
      return Load<int8_t>(p);
    case NpyType::kInt16:
      return Load<int16_t>(p);
    case NpyType::kUint16:
      return Load<uint16_t>(p);
    case NpyType::kInt32:
      return Load<int32_t>(p);
    case NpyType::kUint32:
      return Load<uint32_t>(p);
    case NpyType::kInt64:
      return Load<int64_t>(p);
    case NpyType::kUint64:
      return static_cast<int64_t>(Load<uint64_t>(p));
    case NpyType::kFloat32:
    case NpyType::kFloat16:
      return static_cast<int64_t>(FloatOf(p, type));
  }
  return 0;
}

// `n` elements of `type` at `raw` converted to float: the one conversion
// of rows, read through the mapping or with pread.
void ElementsToFloats(const uint8_t* raw, uint64_t n, NpyType type, float* out) {
  if (type == NpyType::kFloat32) {
    std::memcpy(out, raw, n * 4);
    return;
  }
  if (type == NpyType::kUint8) {
    for (uint64_t j = 0; j < n; ++j) out[j] = static_cast<float>(raw[j]);
    return;
  }
  const size_t size = NpyTypeSize(type);
  for (uint64_t j = 0; j < n; ++j) out[j] = FloatOf(raw + j * size, type);
}

}  // namespace

const char* NpyTypeName(NpyType type) {
  switch (type) {
    case NpyType::kFloat32:
      return "float32";
    case NpyType::kFloat16:
      return "float16";
    case NpyType::kUint8:
      return "uint8";
    case NpyType::kInt8:
      return "int8";
    case NpyType::kInt16:
      return "int16";
    case NpyType::kUint16:
      return "uint16";
    case NpyType::kInt32:
      return "int32";
    case NpyType::kUint32:
      return "uint32";
    case NpyType::kInt64:
      return "int64";
    case NpyType::kUint64:
      return "uint64";
  }
  return "?";
}

size_t NpyTypeSize(NpyType type) {
  switch (type) {
    case NpyType::kUint8:
    case NpyType::kInt8:
      return 1;
    case NpyType::kFloat16:
    case NpyType::kInt16:
    case NpyType::kUint16:
      return 2;
    case NpyType::kFloat32:
    case NpyType::kInt32:
    case NpyType::kUint32:
      return 4;
    case NpyType::kInt64:
    case NpyType::kUint64:
      return 8;
  }
  return 1;
}

bool NpyTypeIsFloat(NpyType type) { return type == NpyType::kFloat32 || type == NpyType::kFloat16; }

uint64_t NpyHeader::elements() const {
  uint64_t n = 1;
  for (const uint64_t d : shape) n *= d;  // bounded by ParseNpyHeader
  return n;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view text, const std::string& path) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  if (text.size() < kMagicBytes + 2 || text.substr(0, kMagicBytes) != kNpyMagic) {
    return Bad(path, "not a .npy file (it does not begin with \\x93NUMPY)");
  }
  const int major = bytes[6];
  if (major < 1 || major > 3) {
    return Bad(path, absl::StrCat(".npy format version ", major, ".", int{bytes[7]},
                                  " is not one of 1.0, 2.0, 3.0"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t preamble = kMagicBytes + 2 + length_bytes;
  if (text.size() < preamble) return Bad(path, "the file ends inside its .npy preamble");
  const size_t dictionary_bytes = major == 1 ? LoadU16(bytes + 8) : LoadU32(bytes + 8);
  if (dictionary_bytes > kMaxNpyHeaderBytes) {
    return Bad(path, absl::StrCat("a .npy header of ", dictionary_bytes, " bytes (over ",
                                  kMaxNpyHeaderBytes, ")"));
  }
  if (text.size() < preamble + dictionary_bytes) {
    return Bad(path, "the file ends inside its .npy header");
  }
  absl::StatusOr<NpyHeader> header =
      DictionaryParser(text.substr(preamble, dictionary_bytes), path).Parse();
  if (!header.ok()) return header.status();
  // The data's bytes fit in 2^62: no product below overflows.
  unsigned __int128 total = NpyTypeSize(header->type);
  for (const uint64_t d : header->shape) {
    total *= d;
    if (total > (uint64_t{1} << 62)) {
      return Bad(path, absl::StrCat("shape (", absl::StrJoin(header->shape, ", "),
                                    ") is too large (over 2^62 bytes)"));
    }
  }
  header->data_offset = preamble + dictionary_bytes;
  return header;
}

absl::StatusOr<NpyFile> NpyFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    if (e == EMFILE) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot open: ", std::strerror(e),
                       " (a NumPy dataset keeps one open a feature file: raise `ulimit -n`)"));
    }
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  }
  NpyFile file;
  file.path_ = path;
  file.map_bytes_ = static_cast<size_t>(st.st_size);
  if (file.map_bytes_ > 0) {
    file.map_ = ::mmap(nullptr, file.map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  const int map_errno = errno;
  file.fd_ = fd;  // closed with the file, whatever follows
  if (file.map_ == MAP_FAILED || file.map_ == nullptr) {
    file.map_ = nullptr;
    errno = map_errno;
    if (file.map_bytes_ == 0) return Bad(path, "not a .npy file (it is empty)");
    return absl::UnavailableError(absl::StrCat(path, ": cannot map it: ", std::strerror(errno)));
  }
  const std::string_view all(static_cast<const char*>(file.map_), file.map_bytes_);
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(all, path);
  if (!header.ok()) return header.status();
  file.header_ = *std::move(header);
  const uint64_t data_bytes = file.header_.elements() * NpyTypeSize(file.header_.type);
  const uint64_t have = file.map_bytes_ - file.header_.data_offset;
  if (have != data_bytes) {
    return Bad(path, absl::StrCat(have < data_bytes ? "truncated" : "longer than its shape says",
                                  ": shape (", absl::StrJoin(file.header_.shape, ", "), ") of ",
                                  NpyTypeName(file.header_.type), " needs ", data_bytes,
                                  " bytes of data, the file has ", have));
  }
  file.data_ = static_cast<const uint8_t*>(file.map_) + file.header_.data_offset;
  return file;
}

NpyFile::NpyFile(NpyFile&& other) noexcept { *this = std::move(other); }

NpyFile& NpyFile::operator=(NpyFile&& other) noexcept {
  if (this == &other) return *this;
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
  path_ = std::move(other.path_);
  header_ = std::move(other.header_);
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  data_ = std::exchange(other.data_, nullptr);
  fd_ = std::exchange(other.fd_, -1);
  return *this;
}

NpyFile::~NpyFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

uint64_t NpyFile::rows() const { return header_.shape.empty() ? 1 : header_.shape[0]; }

uint64_t NpyFile::row_elements() const {
  uint64_t n = 1;
  for (size_t i = 1; i < header_.shape.size(); ++i) n *= header_.shape[i];
  return n;
}

float NpyFile::FloatAt(uint64_t i) const {
  return FloatOf(data_ + i * NpyTypeSize(header_.type), header_.type);
}

int64_t NpyFile::IntegerAt(uint64_t i) const {
  return IntegerOf(data_ + i * NpyTypeSize(header_.type), header_.type);
}

void NpyFile::Advise(int advice) const {
  if (map_ != nullptr) madvise(map_, map_bytes_, advice);
}

absl::Status NpyFile::CheckUnchangedSize() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    return absl::UnavailableError(absl::StrCat(path_, ": fstat: ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) == map_bytes_) return absl::OkStatus();
  return Bad(path_, absl::StrCat("now ", st.st_size, " bytes, ", map_bytes_,
                                 " when it was checked (it was cut or rewritten since)"));
}

std::pair<uint64_t, uint64_t> NpyFile::ResidentPages() const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uint64_t pages = (map_bytes_ + page - 1) / page;
  if (map_ == nullptr) return {0, pages};
  // In pieces of 1 GiB (4 KiB pages): a byte a page, 256 KiB at most.
  constexpr uint64_t kPiecePages = uint64_t{1} << 18;
  std::vector<unsigned char> in(std::min(pages, kPiecePages));
  uint64_t resident = 0;
  for (uint64_t first = 0; first < pages; first += kPiecePages) {
    const uint64_t n = std::min(kPiecePages, pages - first);
    char* at = static_cast<char*>(map_) + first * page;
    if (mincore(at, std::min<uint64_t>(n * page, map_bytes_ - first * page), in.data()) != 0) {
      return {0, pages};
    }
    for (uint64_t i = 0; i < n; ++i) resident += in[i] & 1;
  }
  return {resident, pages};
}

void NpyFile::AdviseReads(int advice) const {
  if (fd_ >= 0) posix_fadvise(fd_, 0, 0, advice);
}

void NpyFile::RowAsFloats(uint64_t row, float* out) const {
  const uint64_t n = row_elements();
  ElementsToFloats(data_ + row * n * NpyTypeSize(header_.type), n, header_.type, out);
}

absl::Status NpyFile::ReadRowsAsFloats(uint64_t first_row, uint64_t rows, std::vector<uint8_t>& raw,
                                       float* out) const {
  const uint64_t n = row_elements(), row_bytes = n * NpyTypeSize(header_.type);
  // Float32 rows are read into `out` itself; others in pieces of about
  // 1 MiB through `raw`, converted piece by piece (a test split's chunk is
  // up to 64 MiB of floats: no second copy of it).
  const bool in_place = header_.type == NpyType::kFloat32;
  const uint64_t piece_rows =
      std::max<uint64_t>(1, (uint64_t{1} << 20) / std::max<uint64_t>(1, row_bytes));
  for (uint64_t row = first_row; row < first_row + rows;) {
    const uint64_t take =
        in_place ? first_row + rows - row : std::min(piece_rows, first_row + rows - row);
    const uint64_t bytes = take * row_bytes;
    const off_t offset = off_t(header_.data_offset + row * row_bytes);
    uint8_t* into = reinterpret_cast<uint8_t*>(out + (row - first_row) * n);
    if (!in_place) {
      raw.resize(bytes);
      into = raw.data();
    }
    for (uint64_t done = 0; done < bytes;) {
      const ssize_t got = ::pread(fd_, into + done, bytes - done, offset + off_t(done));
      if (got > 0) {
        done += uint64_t(got);
      } else if (got == 0) {
        return Bad(path_, absl::StrCat("rows ", first_row, " to ", first_row + rows - 1,
                                       ": the file ends ", bytes - done,
                                       " bytes short of them (it was cut since it was checked)"));
      } else if (errno != EINTR) {
        return absl::UnavailableError(absl::StrCat(path_, ": reading rows ", first_row, " to ",
                                                   first_row + rows - 1, ": ",
                                                   std::strerror(errno)));
      }
    }
    if (!in_place)
      ElementsToFloats(raw.data(), take * n, header_.type, out + (row - first_row) * n);
    row += take;
  }
  return absl::OkStatus();
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t{half & 0x8000u} << 16;
  const uint32_t exponent = (half >> 10) & 0x1F;
  uint32_t mantissa = half & 0x3FF;
  if (exponent == 0x1F) {  // Inf, NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalize it into a float's exponent.
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400) == 0);
    return std::bit_cast<float>(sign | (uint32_t(127 - 15 - e) << 23) | ((mantissa & 0x3FF) << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

std::string NpyBytes(NpyType type, const std::vector<uint64_t>& shape, std::string_view data) {
  static constexpr const char* kDescr[] = {"<f4", "<f2", "|u1", "|i1", "<i2",
                                           "<u2", "<i4", "<u4", "<i8", "<u8"};
  return NpyBytesOfDescr(kDescr[static_cast<int>(type)], shape, data);
}

std::string NpyBytesOfDescr(std::string_view descr, const std::vector<uint64_t>& shape,
                            std::string_view data) {
  const std::string tuple =
      absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
  std::string dict = absl::StrCat("{'descr': '", std::string(descr),
                                  "', 'fortran_order': False, 'shape': ", tuple, ", }");
  // Padded with spaces and a newline so that the data starts on a multiple
  // of 64 bytes, as numpy does.
  const size_t unpadded = kMagicBytes + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, kMagicBytes);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xFF));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  out.append(data);
  return out;
}

}  // namespace reckon::worker
