// Internal to compute/: the part of the attend_chunk kernels (compute/attention.h) that is the
// same for every ISA — one chunk for NQ heads (scores, exp-shifted sums, e.v) and the split of
// n_q heads into groups of at most 4. Included inside the anonymous namespace of
// attention_avx2.cc / attention_avx512.cc after their scores_nq<NQ> and pv_nq<NQ>, so each file,
// compiled for its own ISA, instantiates it with its own kernels (the linker must never merge
// the two). No includes and no namespace here for that reason.

template <int NQ>
void chunk(const float* q, const float* k, const float* v, int64_t m, int64_t stride, int64_t hd, float scale,
           float cap, float* scores, float* out, float* max, float* sum) {
  scores_nq<NQ>(q, hd, k, v, m, stride, scale, cap, scores, m);
  for (int h = 0; h < NQ; ++h) {
    const ExpSum es = exp_shifted_sum(scores + h * m, m);
    max[h] = es.max;
    sum[h] = es.sum;
  }
  pv_nq<NQ>(scores, m, m, v, stride, hd, out);
}

// attend_chunk's contract for n_q heads: groups of 4 (the last may be 1-3) through chunk<NQ>.
inline void chunk_heads(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                        int64_t hd, float scale, float cap, float* scores, AttnPartial part) {
  for (int64_t h = 0; h < n_q; h += 4) {
    const int64_t nh = std::min<int64_t>(4, n_q - h);
    const float* qh = q + h * hd;
    float* sh = scores + h * m;
    float* oh = part.out + h * hd;
    float* mh = part.max + h;
    float* zh = part.sum + h;
    switch (nh) {
      case 4: chunk<4>(qh, k, v, m, stride, hd, scale, cap, sh, oh, mh, zh); break;
      case 3: chunk<3>(qh, k, v, m, stride, hd, scale, cap, sh, oh, mh, zh); break;
      case 2: chunk<2>(qh, k, v, m, stride, hd, scale, cap, sh, oh, mh, zh); break;
      default: chunk<1>(qh, k, v, m, stride, hd, scale, cap, sh, oh, mh, zh); break;
    }
  }
}
