{
  description = "cohort: a multi-host training launcher on Bun and Effect-TS";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      # `nix develop`: the tools cohort builds and runs with. The project pins
      # its own Bun (1.4.4, from npm, see package.json); the shell's bun and
      # node only bootstrap it.
      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [
            bun
            nodejs_20
            cargo
            rustc
            rustfmt
            clippy
            openssh # ssh fan-out to worker hosts
            util-linux # setpriv --pdeathsig: children die with their launcher
            iproute2 # network-namespace hosts in the multi-host tests
            git
          ];
          shellHook = ''
            echo "cohort dev shell: $(node --version), $(cargo --version)"
            echo "  npx --yes bun@1.4.4 install --frozen-lockfile && npx bun run test"
          '';
        };
      });

      formatter = forAllSystems (pkgs: pkgs.nixpkgs-fmt);
    };
}
