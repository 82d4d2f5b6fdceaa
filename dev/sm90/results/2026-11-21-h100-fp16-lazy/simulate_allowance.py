import numpy as np, sys
dt=np.float16; L2=np.float32(np.log2(np.e))
def attn_case(rng,sq,sk,d,std,bn,policies,causal,heads):
    errb=0; errs=np.zeros(len(policies))
    for h in range(heads):
        q=(rng.standard_normal((sq,d))*std).astype(dt); k=(rng.standard_normal((sk,d))*std).astype(dt); v=rng.standard_normal((sk,d)).astype(dt)
        scale=1/np.sqrt(d)
        s64=q.astype(np.float64)@k.astype(np.float64).T*scale
        mask=None
        if causal:
            mask=np.arange(sk)[None,:]>np.arange(sq)[:,None]+(sk-sq); s64[mask]=-np.inf
        p64=np.exp(s64-s64.max(1,keepdims=True)); ref=(p64/p64.sum(1,keepdims=True))@v.astype(np.float64)
        s32=(q.astype(np.float32)@k.astype(np.float32).T)*np.float32(scale)
        if causal: s32[mask]=-np.inf
        p=np.exp(s32-s32.max(1,keepdims=True)); p=(p/p.sum(1,keepdims=True)).astype(dt)
        base=(p.astype(np.float32)@v.astype(np.float32)).astype(dt)
        errb=max(errb,np.abs(base.astype(np.float64)-ref).max())
        ntiles=(sk+bn-1)//bn
        for pi,(theta,eager_steps) in enumerate(policies):
            m=np.full(sq,-np.inf,np.float32); l=np.zeros(sq,np.float32); o=np.zeros((sq,d),np.float32)
            for step,t in enumerate(range(ntiles-1,-1,-1)):
                j0=t*bn; x=s32[:,j0:j0+bn]*L2; nm=x.max(1)
                th=0 if step<eager_steps else theta
                move=nm>m+th; um=np.where(move,nm,m); sub=np.where(np.isneginf(um),0,um)
                corr=np.where(move,np.exp2(m-sub),1).astype(np.float32)
                o*=corr[:,None]; l*=corr
                pp=np.exp2(x-sub[:,None]).astype(np.float32); pr=pp.astype(dt)
                l+=pp.sum(1); o+=pr.astype(np.float32)@v[j0:j0+bn].astype(np.float32); m=um
            with np.errstate(invalid='ignore',divide='ignore'):
                out=(o/l[:,None]).astype(dt)
            errs[pi]=max(errs[pi],np.abs(out.astype(np.float64)-ref).max())
    return errs/(2*errb+1e-5)
policies=[(0,1),(8,1),(8,2),(3,1),(3,2),(2,1),(2,2),(4,2)]
names=['eager','th8','th8e2','th3','th3e2','th2','th2e2','th4e2']
rng=np.random.default_rng(int(sys.argv[1]))
for (sq,sk,std,bn,causal,heads) in [(257,257,1,128,False,16),(257,257,1,128,True,16),(1000,1000,1,128,False,4),(300,300,1,128,True,16),(129,129,30,128,True,4),(512,512,30,128,False,4),(2048,2048,1,80,False,1)]:
    R=np.array([attn_case(rng,sq,sk,128,std,bn,policies,causal,heads) for _ in range(4)])
    print(sq,sk,std,bn,'c' if causal else 'nc',' '.join('%s %.2f/%.2f'%(n,R[:,i].mean(),R[:,i].max()) for i,n in enumerate(names)),flush=True)
