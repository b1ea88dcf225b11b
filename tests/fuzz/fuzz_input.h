// Splits a fuzzer's bytes into header fields and a payload.
#ifndef RECKON_TESTS_FUZZ_FUZZ_INPUT_H_
#define RECKON_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace reckon::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), size_);
    std::memcpy(&v, data_, n);
    data_ += n;
    size_ -= n;
    return v;
  }
  std::string_view Rest() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace reckon::fuzz

#endif  // RECKON_TESTS_FUZZ_FUZZ_INPUT_H_
