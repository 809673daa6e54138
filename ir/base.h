/* base.h - what the graph (ir.h) and the train section (config.h) both name: the largest rank
 * and the devices.  Here, so that config.h stands without the Graph: the trainer reads the train
 * section and the model ABI, never the IR (docs/architecture.md, "Layers"). */
#ifndef NNC_BASE_H
#define NNC_BASE_H

/* The most axes a tensor has inside a model (timm's attention reshapes to [B, N, 3, H, D]); the
 * model's inputs, parameters and outputs, which the model ABI describes (nnc_tensor_info.dims),
 * have at most IR_IO_RANK. */
#define IR_MAX_RANK 6
#define IR_IO_RANK 4
#define IR_PERM_ID \
    { 0, 1, 2, 3, 4, 5 } /* the identity order of IR_MAX_RANK axes */

/* A device: the host, or GPU k as DEV_CUDA + k (cuda:0 is DEV_CUDA, written "cuda"), as torch's
 * torch.device("cuda:1").  Arrays over devices have NNC_MAX_DEVICES entries. */
typedef enum { DEV_CPU, DEV_CUDA } Device;
#define NNC_MAX_GPUS 8
#define NNC_MAX_DEVICES (1 + NNC_MAX_GPUS)
#define DEV_GPU(k) ((Device)(DEV_CUDA + (k))) /* cuda:k */
#define DEV_IS_GPU(d) ((int)(d) >= (int)DEV_CUDA)
#define DEV_GPU_INDEX(d) ((int)(d) - (int)DEV_CUDA)
#endif
