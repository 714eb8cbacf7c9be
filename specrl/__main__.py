from specrl.cli.main import main

raise SystemExit(main())
