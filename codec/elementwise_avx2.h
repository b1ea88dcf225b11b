// The elementwise passes' AVX2 copies (elementwise_avx2.cc), for
// elementwise.cc's dispatch alone: callers use elementwise.h, which picks
// a copy by Isa. Each has the contract of its elementwise.h function
// (weights null: no float copy). REQUIRES: the CPU has AVX2.
// Threads: pure functions of their arguments; any thread.
#ifndef RECKON_CODEC_ELEMENTWISE_AVX2_H_
#define RECKON_CODEC_ELEMENTWISE_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace reckon::codec::elementwise_avx2 {

void EncodeDense(const float* values, size_t n, int fraction_bits, char* payload);
bool DenseValid(const char* payload, size_t n);
bool DensePayloadsEqual(const char* payload, const char* expected, size_t n);
void SubtractDense(float* residual, const char* payload, size_t n, int fraction_bits);
bool DecodeDense(const char* payload, size_t n, int64_t* quanta);
bool DenseEqual(const char* payload, const int64_t* quanta, size_t n);
uint64_t AddDenseWrapping(int64_t* quanta, const char* payload, size_t n, float* weights,
                          double quantum);
uint64_t AddWrapping(int64_t* quanta, const int64_t* delta, size_t n, float* weights,
                     double quantum);
void SubtractQuanta(float* residual, const int64_t* quanta, size_t n, double quantum);
void QuantaToFloats(const int64_t* quanta, size_t n, double quantum, float* weights);

}  // namespace reckon::codec::elementwise_avx2

#endif  // RECKON_CODEC_ELEMENTWISE_AVX2_H_
