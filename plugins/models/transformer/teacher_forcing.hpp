// The teacher-forced "translation" OpenSeq2Seq's Text2Text eval scored with
// BLEU: the decoder's most probable token at each position when fed the
// reference prefix. rig reports its BLEU only as `teacher_forced_bleu`, never
// as the translation score (the engine scores ModelOutput::teacher_forced_predictions).
#pragma once

#include <cstdint>

#include "rig/tensor.hpp"

namespace rig_transformer {

// argmax i64 [B, T] (the teacher-forced argmax token at each target
// position) and target_lengths i64 [B] -> i64 [B, T] in infer()'s format:
// row b's tokens up to its reference length, cut after the first eos_id,
// then pad_id.
rig::Tensor teacher_forced_predictions(const rig::Tensor& argmax, const rig::Tensor& target_lengths,
                                       std::int64_t eos_id, std::int64_t pad_id);

}  // namespace rig_transformer
