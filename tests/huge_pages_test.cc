// base/huge_pages.h: large blocks aligned to 2 MiB and advised for huge
// pages (the kernel then calls their mapping THP-eligible); small ones plain.
#include "base/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace reckon::base {
namespace {

// /proc/self/smaps's THPeligible for the mapping holding `p`: -1 when the
// kernel does not say.
int ThpEligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= address && address < end;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

std::string ThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode;
}

TEST(RandomAccessMemory, LargeBlocksAreAlignedAndAdvisedForHugePages) {
  constexpr size_t kBytes = 3 * kHugePageBytes + 12345;
  auto* big = static_cast<unsigned char*>(AllocateForRandomAccess(kBytes));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHugePageBytes, 0u);
  for (size_t i = 0; i < kBytes; i += 4096) big[i] = static_cast<unsigned char>(i >> 12);
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(big[i], static_cast<unsigned char>(i >> 12));
  const std::string mode = ThpMode();
  const int eligible = ThpEligible(big);
  FreeForRandomAccess(big, kBytes);
  if (mode.empty() || mode.find("[never]") != std::string::npos || eligible < 0) {
    GTEST_SKIP() << "this kernel gives no transparent huge pages (enabled: '" << mode
                 << "', THPeligible " << eligible << "): only the alignment was checked";
  }
  EXPECT_EQ(eligible, 1) << "THP mode '" << mode << "'";
}

TEST(RandomAccessMemory, SmallBlocksAndVectorsWork) {
  void* small = AllocateForRandomAccess(1000);
  ASSERT_NE(small, nullptr);
  FreeForRandomAccess(small, 1000);
  std::vector<int64_t, RandomAccessAllocator<int64_t>> values(1 << 20, 7);
  values.push_back(8);
  EXPECT_EQ(values.front(), 7);
  EXPECT_EQ(values.back(), 8);
  std::vector<int64_t, RandomAccessAllocator<int64_t>> copy = values;
  EXPECT_EQ(copy, values);
}

}  // namespace
}  // namespace reckon::base
