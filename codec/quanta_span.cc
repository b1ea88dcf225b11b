#include "codec/quanta_span.h"

#include <algorithm>

#include "codec/elementwise.h"

namespace reckon::codec {

void QuantaSpan::CopyTo(size_t begin, size_t end, int64_t* out) const {
  if (fp32_bytes_ == nullptr) {
    std::copy(int64s_ + begin, int64s_ + end, out);
    return;
  }
  // Checked bytes (the class's contract): every value converts.
  DecodeDenseFp32Values(fp32_bytes_ + 4 * begin, end - begin, out);
}

}  // namespace reckon::codec
