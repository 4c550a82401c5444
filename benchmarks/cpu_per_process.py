"""CPU per process and thread while a command runs: sampled from /proc over SPAN seconds after WARM seconds.

    python benchmarks/cpu_per_process.py pymq-bench producer --embedded --quiet --json --duration 6 --concurrency 8

CPU% per thread and per process of the command and its children; with pymq-bench --json the
rate is printed too, so CPU time per message = CPU% / rate.
"""
import os, sys, subprocess, time, json
p = subprocess.Popen(sys.argv[1:], stdout=open('/tmp/cpuwatch.out','w'), stderr=subprocess.DEVNULL)
def procs(root):
    out=[root]
    for q in os.listdir('/proc'):
        if q.isdigit():
            try:
                ppid=int(open(f'/proc/{q}/stat').read().rsplit(')',1)[1].split()[1])
            except Exception: continue
            if ppid==root: out+=procs(int(q))
    return out
def snap():
    d={}
    for pid in procs(p.pid):
        try:
            for t in os.listdir(f'/proc/{pid}/task'):
                f=open(f'/proc/{pid}/task/{t}/stat').read(); name=f[f.index('(')+1:f.rindex(')')]
                x=f.rsplit(')',1)[1].split(); d[(pid,int(t),name)]=int(x[11])+int(x[12])
        except Exception: pass
    return d
time.sleep(float(os.environ.get('WARM','2.5'))); a=snap(); t0=time.time(); time.sleep(float(os.environ.get('SPAN','2'))); b=snap(); dt=time.time()-t0
hz=os.sysconf('SC_CLK_TCK'); tot={}
for k in b:
    if k in a:
        v=(b[k]-a[k])/hz/dt*100
        if v>0.4: print(f"{k[0]:>7} {k[1]:>7} {k[2]:<16} {v:5.1f}%")
        tot[k[0]]=tot.get(k[0],0)+v
print("per process:", {k: round(v,1) for k,v in tot.items()})
p.wait()
try: print(json.load(open('/tmp/cpuwatch.out'))['msgs_per_sec'])
except Exception as e: print('no json', e)
