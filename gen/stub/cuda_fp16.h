/* ncclgo stand-in: nccl.h includes this header but declares nothing from it in C. */
