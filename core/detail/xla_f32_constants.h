// Coefficients of XLA's float32 log, log1p and erf_inv, shared by the host and tensor versions.
#pragma once

namespace nnx::detail::xla_f32 {

// log: Cephes' degree-8 polynomial for log1p(m - 1), highest power first; ln 2 split in two.
inline constexpr float kLogPoly[9] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                                      -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                                      2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
inline constexpr float kLn2Lo = -2.12194440e-4f, kLn2Hi = 0.693359375f;
inline constexpr float kSqrtHalf = 0.707106781186547524f;

// log1p near 0: Cephes' rational function x^3 P(x) / Q(x), highest power first.
inline constexpr float kLog1pNum[7] = {
    4.5270000862445199635215e-5f, 4.9854102823193375972212e-1f, 6.5787325942061044846969e0f,
    2.9911919328553073277375e1f,  6.0949667980987787057556e1f,  5.7112963590585538103336e1f,
    2.0039553499201281259648e1f};
inline constexpr float kLog1pDen[7] = {
    1.0f,                         1.5062909083469192043167e1f, 8.3047565967967209469434e1f,
    2.2176239823732856465394e2f,  3.0909872225312059774938e2f, 2.1642788614495947685003e2f,
    6.0118660497603843919306e1f};
inline constexpr float kLog1pNear = 0.41421356237309504880f;  // sqrt(2) - 1

// erf_inv (Giles): polynomials in w - 2.5 (w < 5) and sqrt(w) - 3, highest power first.
inline constexpr float kErfInvCentral[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                            -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                            -0.00417768164f,  0.246640727f,    1.50140941f};
inline constexpr float kErfInvTail[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                         -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                         0.00943887047f,   1.00167406f,     2.83297682f};

}  // namespace nnx::detail::xla_f32
