// NumPy's .npy files (numpy.lib.format, versions 1.0, 2.0 and 3.0), read
// without NumPy: the header's dictionary ('descr', 'fortran_order',
// 'shape') parsed and checked, the data memory-mapped, never copied whole.
// Issue 35's datasets are such files (features float32, float16 or uint8 of
// shape [N, D]; labels integers of shape [N]).
//
// A file is a network's input as much as a peer's frame is: every size is
// checked before it is trusted (the header is at most 1 MiB, the shape's
// product fits, the data is exactly as long as the shape says), and a
// refusal names the file and what is wrong with it.
//
// Threads: functions over files, any thread. Errors: a missing file is
// kNotFound, anything else wrong kDataLoss, naming the file.
#ifndef RECKON_WORKER_NPY_H_
#define RECKON_WORKER_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::worker {

enum class NpyType {
  kFloat32,
  kFloat16,
  kUint8,
  kInt8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64
};
const char* NpyTypeName(NpyType type);  // "float32", "uint8", ...
size_t NpyTypeSize(NpyType type);
bool NpyTypeIsFloat(NpyType type);

struct NpyHeader {
  NpyType type = NpyType::kFloat32;
  std::vector<uint64_t> shape;  // () is a scalar: one element
  size_t data_offset = 0;       // bytes before the data: magic, lengths, dictionary
  uint64_t elements() const;    // the shape's product
};

// The longest dictionary accepted (numpy writes tens of bytes).
inline constexpr size_t kMaxNpyHeaderBytes = size_t{1} << 20;

// Parses the start of a .npy file: `bytes` holds at least its preamble and
// dictionary (more is ignored). kDataLoss naming `path` and the fault: not
// a .npy file (magic), a version other than 1, 2 or 3, a dictionary over
// kMaxNpyHeaderBytes or cut short, a key missing or unknown, a type this
// reader does not take (big-endian, complex, objects, strings: each named
// with the conversion that fixes it), Fortran order, a dimension whose
// product overflows 2^62 bytes.
absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes, const std::string& path);

// A .npy file mapped read-only. Moves; unmaps when destroyed.
class NpyFile {
 public:
  // Opens, parses and maps `path`. kNotFound when it is missing; kDataLoss
  // as ParseNpyHeader's, and when the data is shorter or longer than the
  // shape says.
  static absl::StatusOr<NpyFile> Open(const std::string& path);
  NpyFile(NpyFile&& other) noexcept;
  NpyFile& operator=(NpyFile&& other) noexcept;
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;
  ~NpyFile();

  const std::string& path() const { return path_; }
  const NpyHeader& header() const { return header_; }
  // Rows: the first dimension (1 for a scalar); row_elements: the rest's
  // product.
  uint64_t rows() const;
  uint64_t row_elements() const;

  // Element `i` (row-major), converted: a float type to float, an integer
  // type to int64 (uint64 past 2^63 wraps: labels are checked by range).
  // REQUIRES: i < header().elements().
  float FloatAt(uint64_t i) const;
  int64_t IntegerAt(uint64_t i) const;
  // Row `row` (row_elements() values) converted to float into `out`, read
  // through the mapping.
  void RowAsFloats(uint64_t row, float* out) const;
  // Rows [first_row, first_row + rows) converted to float into `out` as
  // RowAsFloats converts them, read with pread(2) into `raw` (scratch,
  // resized) instead of through the mapping: their pages stay in the page
  // cache only, never mapped into the process, where the kernel reclaims a
  // page with no walk of its mappings and no TLB shootdown (a dataset
  // larger than memory: samples.h). kDataLoss naming the file and the rows
  // when the file has become shorter since it was opened; kUnavailable
  // with the error when the read fails. REQUIRES: first_row + rows <=
  // rows().
  absl::Status ReadRowsAsFloats(uint64_t first_row, uint64_t rows, std::vector<uint8_t>& raw,
                                float* out) const;
  // The mapped data (header().elements() x NpyTypeSize bytes).
  const uint8_t* data() const { return data_; }
  // madvise(2) on the whole mapping (MADV_DONTNEED: its pages unmapped
  // from the process, kept in the page cache).
  void Advise(int advice) const;
  // kDataLoss naming the file when it is no longer the size it was
  // opened at (cut or rewritten since): a read through the mapping past
  // its new end would be zeros or a SIGBUS.
  absl::Status CheckUnchangedSize() const;
  // The mapping's pages in the page cache (mincore(2)), and its pages.
  std::pair<uint64_t, uint64_t> ResidentPages() const;
  // posix_fadvise(2) on the whole file, for ReadRowsAsFloats
  // (POSIX_FADV_RANDOM: no read-ahead around each read, for rows read in a
  // shuffled order).
  void AdviseReads(int advice) const;

 private:
  NpyFile() = default;

  std::string path_;
  NpyHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  int fd_ = -1;  // open while mapped: ReadRowsAsFloats' reads
  const uint8_t* data_ = nullptr;
};

// IEEE 754 binary16 to float, exactly (every half is a float).
float HalfToFloat(uint16_t half);

// The bytes of a .npy file (version 1.0, C order) of `type` and `shape`
// holding `data`: for tests and for reckonctl predict's output. REQUIRES:
// data.size() == elements x NpyTypeSize(type).
std::string NpyBytes(NpyType type, const std::vector<uint64_t>& shape, std::string_view data);
// The same for any numpy type string `descr` ("<U7": a string of 7
// characters, UTF-32LE): the exported model's activation name.
std::string NpyBytesOfDescr(std::string_view descr, const std::vector<uint64_t>& shape,
                            std::string_view data);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_NPY_H_
