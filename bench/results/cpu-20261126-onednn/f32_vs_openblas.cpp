#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>
using namespace dnnl;

template <class F>
double med(F f) {
    f();
    std::vector<double> v;
    for (int i = 0; i < 5; i++) {
        auto t = std::chrono::steady_clock::now();
        f();
        v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    std::sort(v.begin(), v.end());
    return v[2];
}

int main() {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    int shapes[][3] = {{2048, 1024, 3456}, {2048, 512, 1024}, {2048, 256, 512}, {2048, 3456, 1024},
                       {2048, 1024, 1024}, {256, 1024, 3456}, {256, 3456, 3456}};
    for (auto& sh : shapes) {
        int M = sh[0], N = sh[1], K = sh[2];
        std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N);
        double tb = med([&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A.data(), K, B.data(),
                        K, 0, C.data(), N);
        });
        double fl = 2.0 * M * N * K;
        for (int bf = 0; bf < 2; bf++) {
            memory::desc ad({M, K}, memory::data_type::f32, memory::format_tag::ab);
            memory::desc bd({K, N}, memory::data_type::f32, memory::format_tag::ba);
            memory::desc cd({M, N}, memory::data_type::f32, memory::format_tag::ab);
            primitive_attr at;
            if (bf)
                at.set_fpmath_mode(fpmath_mode::bf16);
            matmul::primitive_desc pd(matmul::desc(ad, bd, cd), at, eng);
            matmul mm(pd);
            memory am(ad, eng, A.data()), bm(bd, eng, B.data()), cm(cd, eng, C.data());
            double t = med([&] {
                mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
                s.wait();
            });
            // bf16 inputs
            double t2 = 0;
            if (bf) {
                memory::desc ad2({M, K}, memory::data_type::bf16, memory::format_tag::ab);
                memory::desc bd2({K, N}, memory::data_type::bf16, memory::format_tag::any);
                matmul::primitive_desc pd2(matmul::desc(ad2, bd2, cd), eng);
                matmul mm2(pd2);
                memory a2(ad2, eng), b2(pd2.weights_desc(), eng);
                t2 = med([&] {
                    mm2.execute(s,
                                {{DNNL_ARG_SRC, a2}, {DNNL_ARG_WEIGHTS, b2}, {DNNL_ARG_DST, cm}});
                    s.wait();
                });
                printf("%dx%dx%d impl %s / %s\n", M, N, K, pd.impl_info_str(), pd2.impl_info_str());
            }
            printf("M%d N%d K%d blas %.0f GF  dnnl %s %.0f GF %s\n", M, N, K, fl / tb / 1e9,
                   bf ? "fpmath-bf16" : "f32", fl / t / 1e9,
                   bf ? (std::to_string(fl / t2 / 1e9) + " GF bf16-in").c_str() : "");
        }
    }
}
