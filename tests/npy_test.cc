// worker/npy.h: .npy files read as numpy writes them, and every malformed
// one refused naming the file and the fault.
#include "worker/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/test_process.h"

namespace reckon::worker {
namespace {

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string Write(const ::reckon::testing::ScratchDir& dir, const std::string& name,
                  const std::string& bytes) {
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A header as numpy 1.x writes one for np.save(np.zeros((2, 3), 'f4')),
// byte for byte: version 1.0, the dictionary padded to 64 bytes.
TEST(Npy, ReadsWhatNumpyWritesFloat32Float16AndIntegers) {
  ::reckon::testing::ScratchDir dir;
  const std::string numpy_header = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                   "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                                   std::string(58, ' ') + "\n";
  ASSERT_EQ(numpy_header.size(), 128u);
  const std::vector<float> f = {0.5f, -1.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
  absl::StatusOr<NpyFile> x = NpyFile::Open(Write(dir, "x.npy", numpy_header + RawBytes(f)));
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->header().type, NpyType::kFloat32);
  EXPECT_EQ(x->header().shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(x->header().data_offset, 128u);
  EXPECT_EQ(x->rows(), 2u);
  EXPECT_EQ(x->row_elements(), 3u);
  std::vector<float> row(3);
  x->RowAsFloats(1, row.data());
  EXPECT_EQ(row, (std::vector<float>{1e30f, -0.0f, 7.0f}));
  EXPECT_EQ(x->FloatAt(2), 3e-8f);
  // What NpyBytes writes reads back the same.
  EXPECT_EQ(NpyBytes(NpyType::kFloat32, {2, 3}, RawBytes(f)).substr(0, 128), numpy_header);

  // float16: 1, -2, the largest half, the smallest subnormal, -inf.
  const std::vector<uint16_t> h = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0xFC00, 0x0000};
  absl::StatusOr<NpyFile> half =
      NpyFile::Open(Write(dir, "h.npy", NpyBytes(NpyType::kFloat16, {3, 2}, RawBytes(h))));
  ASSERT_TRUE(half.ok()) << half.status();
  std::vector<float> halves(6);
  for (uint64_t r = 0; r < 3; ++r) half->RowAsFloats(r, halves.data() + 2 * r);
  EXPECT_EQ(halves[0], 1.0f);
  EXPECT_EQ(halves[1], -2.0f);
  EXPECT_EQ(halves[2], 65504.0f);
  EXPECT_EQ(halves[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(halves[4], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(halves[5], 0.0f);
  // Every half converts exactly (a float holds each): checked against the
  // value its fields give.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint32_t e = (bits >> 10) & 0x1F, m = bits & 0x3FF;
    if (e == 0x1F) continue;
    const double magnitude =
        e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1024.0 + m, int(e) - 25);
    const double expected = (bits & 0x8000) ? -magnitude : magnitude;
    ASSERT_EQ(double(HalfToFloat(static_cast<uint16_t>(bits))), expected) << bits;
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));

  // Labels: int64 and uint8, one dimension (numpy writes "(4,)").
  const std::vector<int64_t> labels = {0, 9, 3, 1234567890123};
  absl::StatusOr<NpyFile> y =
      NpyFile::Open(Write(dir, "y.npy", NpyBytes(NpyType::kInt64, {4}, RawBytes(labels))));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->header().shape, std::vector<uint64_t>{4});
  EXPECT_EQ(y->row_elements(), 1u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(y->IntegerAt(i), labels[i]);
  const std::vector<uint8_t> bytes = {0, 255, 7};
  absl::StatusOr<NpyFile> u8 =
      NpyFile::Open(Write(dir, "u.npy", NpyBytes(NpyType::kUint8, {3, 1}, RawBytes(bytes))));
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(u8->IntegerAt(1), 255);
  EXPECT_EQ(u8->FloatAt(2), 7.0f);
  // Version 2.0 (a 4-byte header length) and double quotes, no trailing commas.
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8);
  const std::string dict = "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2,)}\n";
  v2 += std::string({static_cast<char>(dict.size()), 0, 0, 0});
  v2 += dict + RawBytes(std::vector<int32_t>{-5, 6});
  absl::StatusOr<NpyFile> two = NpyFile::Open(Write(dir, "v2.npy", v2));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->IntegerAt(0), -5);
}

// ReadRowsAsFloats (pread, in pieces of about 1 MiB) gives RowAsFloats'
// floats (through the mapping), bit for bit, for every type.
TEST(Npy, RowsReadGiveTheMappedRowsFloatsForEveryType) {
  ::reckon::testing::ScratchDir dir;
  constexpr uint64_t kRows = 1500, kElements = 301;  // int64: 2,408 bytes a row, 3.4 MiB
  std::mt19937_64 rng(9);
  for (const NpyType type :
       {NpyType::kFloat32, NpyType::kFloat16, NpyType::kUint8, NpyType::kInt8, NpyType::kInt16,
        NpyType::kUint16, NpyType::kInt32, NpyType::kUint32, NpyType::kInt64, NpyType::kUint64}) {
    SCOPED_TRACE(NpyTypeName(type));
    std::string raw(kRows * kElements * NpyTypeSize(type), '\0');
    for (char& c : raw) c = static_cast<char>(rng());
    absl::StatusOr<NpyFile> file =
        NpyFile::Open(Write(dir, "t.npy", NpyBytes(type, {kRows, kElements}, raw)));
    ASSERT_TRUE(file.ok()) << file.status();
    constexpr uint64_t kFirst = 7, kCount = kRows - 9;
    std::vector<float> read(kCount * kElements), mapped(kCount * kElements);
    std::vector<uint8_t> scratch;
    ASSERT_TRUE(file->ReadRowsAsFloats(kFirst, kCount, scratch, read.data()).ok());
    for (uint64_t r = 0; r < kCount; ++r) file->RowAsFloats(kFirst + r, &mapped[r * kElements]);
    EXPECT_EQ(std::memcmp(read.data(), mapped.data(), read.size() * sizeof(float)), 0);
    EXPECT_LE(scratch.size(), size_t{1} << 20) << "read in pieces";
  }
}

TEST(Npy, EveryMalformedFileIsRefusedNamingTheFileAndTheFault) {
  ::reckon::testing::ScratchDir dir;
  const std::string good =
      NpyBytes(NpyType::kFloat32, {2, 2}, RawBytes(std::vector<float>(4, 1.0f)));
  auto refusal = [&](const std::string& bytes) {
    const std::string path = Write(dir, "bad.npy", bytes);
    absl::StatusOr<NpyFile> f = NpyFile::Open(path);
    EXPECT_FALSE(f.ok());
    if (f.ok()) return std::string("(opened)");
    EXPECT_EQ(f.status().message().substr(0, path.size() + 2), path + ": ") << f.status();
    return std::string(f.status().message().substr(path.size() + 2));
  };
  auto with_dict = [](const std::string& dict) {
    std::string out("\x93NUMPY\x01\x00", 8);
    out.push_back(static_cast<char>(dict.size()));
    out.push_back(0);
    return out + dict;
  };
  EXPECT_EQ(refusal("PK\x03\x04 not numpy"), "not a .npy file (it does not begin with \\x93NUMPY)");
  EXPECT_EQ(refusal(""), "not a .npy file (it is empty)");
  EXPECT_EQ(refusal(good.substr(0, good.size() - 1)),
            "truncated: shape (2, 2) of float32 needs 16 bytes of data, the file has 15");
  EXPECT_EQ(refusal(good + "x"),
            "longer than its shape says: shape (2, 2) of float32 needs 16 bytes of data, the file "
            "has 17");
  std::string v9 = good;
  v9[6] = 9;
  EXPECT_EQ(refusal(v9), ".npy format version 9.0 is not one of 1.0, 2.0, 3.0");
  EXPECT_EQ(refusal(good.substr(0, 40)), "the file ends inside its .npy header");
  std::string huge("\x93NUMPY\x02\x00\x00\x00\x00\x01", 12);  // a 16 MiB dictionary
  EXPECT_EQ(refusal(huge), "a .npy header of 16777216 bytes (over 1048576)");
  EXPECT_EQ(refusal(with_dict("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n")),
            "type '>f4' is big-endian: save it little-endian (x.astype('<f4'))");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n")),
            "float64 is not taken: save it as float32 (x.astype('float32'))");
  EXPECT_EQ(refusal(with_dict("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n")),
            "type '|O' is not a NumPy type");
  EXPECT_EQ(refusal(with_dict("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n")),
            "type '<c8' is not taken (features: float32, float16 or uint8; labels: an integer "
            "type)");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n")),
            "the array is in Fortran order: save it in C order (numpy.ascontiguousarray(x))");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f4', 'shape': (2, 2), }\n")),
            "bad .npy header: the dictionary lacks 'fortran_order'");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -2), }\n")),
            "bad .npy header: 'shape' is not a tuple of integers");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), "
                              "'extra': 1}\n")),
            "bad .npy header: unknown key 'extra'");
  EXPECT_EQ(refusal(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, "
                              "1099511627776), }\n")),
            "shape (1099511627776, 1099511627776) is too large (over 2^62 bytes)");
  EXPECT_EQ(NpyFile::Open((dir / "missing.npy").string()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace reckon::worker
