from gpuportal.main import main

main()
