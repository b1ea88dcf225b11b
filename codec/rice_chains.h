// The Rice decode's two-chain rounds (codec/rice.h explains them; not an
// API: DecodeRice calls them before its one chain).
//
// Threads: a function, any thread; its scratch is its own.
#ifndef RECKON_CODEC_RICE_CHAINS_H_
#define RECKON_CODEC_RICE_CHAINS_H_

#include <cstdint>

#include "codec/rice.h"
#include "codec/rice_bits.h"

namespace reckon::codec {

// Decodes the stream's first codes in two-chain rounds while it holds enough
// of them for another round (and the CPU and `tuning` allow them): returns
// how many went into out (REQUIRES: room for `count`), with *pos and *next
// (the last index + 1) after them; 0, both untouched, when none. What it
// returns is exactly what the one chain decodes there; it refuses nothing
// (a round in doubt is left to the one chain, which gives the refusal).
uint64_t DecodeRiceRounds(const BitReader& reader, uint64_t total_bits, uint64_t count, uint32_t k,
                          uint64_t param_count, const RiceDecodeTuning& tuning, uint64_t* pos,
                          uint64_t* next, uint32_t* out);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_RICE_CHAINS_H_
