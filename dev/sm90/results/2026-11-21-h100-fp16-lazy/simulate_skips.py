import numpy as np
rng=np.random.default_rng(0)
L2=np.log2(np.e)
for sk,bn in [(1024,128),(2048,80),(4096,80),(8192,176),(4096,80)]:
    rows=16*64
    x=rng.standard_normal((rows,sk)).astype(np.float32)*L2  # scores in log2 units (std-1 inputs, 1/sqrt(d) scale)
    out=[]
    for theta in [0,1,2,3,4,8]:
        m=np.full(rows,-np.inf); moves=0; steps=0
        for j0 in range(0,sk,bn):
            nm=x[:,j0:j0+bn].max(1); mv=nm>m+theta; m=np.where(mv,nm,m)
            if j0>0:
                moves+=mv.reshape(-1,16).any(1).sum(); steps+=rows//16
        out.append('th%.1f %.2f'%(theta,moves/steps))
    print(sk,bn,' '.join(out))
