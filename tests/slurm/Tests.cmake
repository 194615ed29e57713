# The SLURM path on a real one-node SLURM cluster (issue #7). Installs slurmctld, slurmd and
# munge through scripts/setup.sh --tests when missing, starts them on localhost, submits
# slurm/train-cpu.sbatch (2 tasks), preempts, requeues, resumes. Fails (never skips) when
# the cluster cannot start. Label: slurm (ctest -L slurm).
mb_add_python_test(slurm slurm/test_slurm.py LABEL slurm TIMEOUT 1200)
set_tests_properties(py.slurm PROPERTIES PROCESSORS 2)
